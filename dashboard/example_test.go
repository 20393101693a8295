package dashboard_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/dashboard"
)

// user is the app's own signed-in user.
type user struct{ Admin bool }

// currentUser stands in for the app's session lookup.
func currentUser(r *http.Request) (user, bool) { return user{}, false }

// The dashboard mounted in the app's own HTTP server, behind the app's own
// authentication. (Compiled, not run: it needs a database.)
func ExampleNew() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("APP_DATABASE__URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	mux := http.NewServeMux()
	redactions := []string{"password", "secret", "token", "authorization", "api_key"}

	svc := fleet.New(pool, fleet.Options{Redact: redactions}) // or fleet.FromConfig(pool, cfg)
	h := dashboard.New(svc, dashboard.Options{
		Path: "/admin/fleet",
		// Optional; nil: Authorization: Bearer <token of fleet:token create>.
		Authenticate: func(r *http.Request) ([]fleet.Ability, error) {
			u, ok := currentUser(r) // your session
			switch {
			case !ok:
				return nil, fmt.Errorf("%w: sign in first", dashboard.ErrUnauthenticated) // 401
			case u.Admin:
				return []fleet.Ability{fleet.AbilityView, fleet.AbilityOperate}, nil
			}
			return []fleet.Ability{fleet.AbilityView}, nil // no view at all: 403
		},
	})
	mux.Handle("/admin/fleet", h)
	mux.Handle("/admin/fleet/", h)
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
