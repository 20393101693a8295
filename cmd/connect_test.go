package cmd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fleet-go/fleet/pgtest"
)

// urlWith returns the server's admin URL with its user, password and
// database replaced (an empty value keeps the admin URL's).
func urlWith(t *testing.T, user, password, db string) string {
	t.Helper()
	u, err := url.Parse(pgtest.AdminURL(t))
	if err != nil || u.Scheme == "" {
		t.Skipf("the test server's URL is not a URL (%v)", err)
	}
	if user != "" {
		u.User = url.UserPassword(user, password)
	}
	if db != "" {
		u.Path = "/" + db
	}
	return u.String()
}

func randomName(t *testing.T, prefix string) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// TestConnectErrorsSayWhatPostgreSQLSaid: a server that refuses the first
// connection is quoted (SQLSTATE and message) with a hint, exit 4, and the
// URL's password never shows.
func TestConnectErrorsSayWhatPostgreSQLSaid(t *testing.T) {
	t.Parallel()
	admin, err := pgx.Connect(t.Context(), pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())

	// A role that may open no connection at all: 53300.
	role := randomName(t, "fleet_nolimit_")
	if _, err := admin.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN CONNECTION LIMIT 0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })

	missingDB := randomName(t, "fleet_missing_")
	missingRole := randomName(t, "fleet_nobody_")
	cases := map[string]struct{ url, want string }{
		"too many connections": {urlWith(t, role, "hunter2", "postgres"), "the database refused a connection: too many connections (the role's connection limit is reached; SQLSTATE 53300: too many connections for role"},
		"no such database":     {urlWith(t, "", "", missingDB), `database "` + missingDB + `" does not exist (SQLSTATE 3D000: database "` + missingDB + `" does not exist)`},
		"no such role":         {urlWith(t, missingRole, "hunter2", "postgres"), `authentication failed for user "` + missingRole + `" (SQLSTATE 28000: role "` + missingRole + `" does not exist)`},
	}
	for name, c := range cases {
		for _, args := range [][]string{{"migrate"}, {"fleet:status"}} {
			r := run(t, t.TempDir(), dbEnv(c.url), args...)
			if r.code != 4 || !strings.Contains(r.stderr, "cannot reach database ") || !strings.Contains(r.stderr, c.want) ||
				strings.Contains(r.stderr, "does not answer") || strings.Contains(r.stderr, "hunter2") ||
				strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("%s: %v: %+v, want exit 4 and one line with %q", name, args, r, c.want)
			}
		}
	}
}

// TestConnectErrorFromAPooler: a pooler that rejects a startup parameter
// (one the URL sets: fleet sends none but application_name) answers 08P01
// before any PostgreSQL is involved; the error says so, and names the key
// whose URL carries it.
func TestConnectErrorFromAPooler(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				be := pgproto3.NewBackend(conn, conn)
				if _, err := be.ReceiveStartupMessage(); err != nil {
					return
				}
				be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "08P01", Message: "unsupported startup parameter: search_path"})
				_ = be.Flush()
			}()
		}
	}()
	u := "postgres://app:hunter2@" + ln.Addr().String() + "/app?sslmode=disable&connect_timeout=5&search_path=app"
	r := run(t, t.TempDir(), dbEnv(u), "fleet:status")
	if r.code != 4 || !strings.Contains(r.stderr, "rejected the connection's startup (SQLSTATE 08P01: unsupported startup parameter: search_path)") ||
		!strings.Contains(r.stderr, "refuses a parameter of database.url itself") ||
		strings.Contains(r.stderr, "hunter2") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("%+v, want exit 4, PostgreSQL's words and the hint", r)
	}
}
