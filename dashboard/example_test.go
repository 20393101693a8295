package dashboard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/dashboard"
	"github.com/fleet-go/fleet/internal/examplekit"
)

// user is the app's own signed-in user.
type user struct{ Admin bool }

// currentUser stands in for the app's session lookup: here an admin is
// signed in when the request carries the header X-Demo-Admin.
func currentUser(r *http.Request) (user, bool) {
	if r.Header.Get("X-Demo-Admin") == "" {
		return user{}, false
	}
	return user{Admin: true}, true
}

// The dashboard mounted in the app's own HTTP server, behind the app's own
// authentication.
func ExampleNew() {
	pool, drop := examplekit.Pool()
	defer drop()

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

	// In the app: http.ListenAndServe(addr, mux). Here, two requests.
	for _, admin := range []bool{false, true} {
		r := httptest.NewRequest(http.MethodGet, "/admin/fleet/api/me", nil)
		if admin {
			r.Header.Set("X-Demo-Admin", "1")
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body.String())
	}
	// Output:
	// 401 {"error":"unauthenticated: sign in first"}
	// 200 {"abilities":["view","operate"]}
}
