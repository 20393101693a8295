package cmd_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/pgtest"
)

// `app migrate sql` needs no database; its script, applied by another tool
// to an empty database, leaves it as `app migrate` would: status clean at
// the latest versions, nothing left to migrate, and the app working on it.
func TestMigrateSQLScriptMigratesAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	r := run(t, t.TempDir(), nil, "migrate", "sql")
	if r.code != 0 || !strings.Contains(r.stdout, `-- fleet migration set "queue", version 1`) || !strings.Contains(r.stdout, "INSERT INTO fleet_schema_migrations") {
		t.Fatalf("migrate sql: code %d, stderr %q", r.code, r.stderr)
	}
	if bad := run(t, t.TempDir(), nil, "migrate", "sql", "--set", "nope"); bad.code != 2 || !strings.Contains(bad.stderr, `no migration set named "nope"`) || bad.stdout != "" {
		t.Fatalf("migrate sql --set nope: %+v", bad)
	}

	admin, err := pgx.Connect(t.Context(), pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	db := randomName(t, "fleet_sqlscript_")
	if _, err := admin.Exec(t.Context(), "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
	url := urlWith(t, "", "", db)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	// No arguments: the whole script goes as one simple query, as psql -f
	// would send it statement by statement.
	_, err = conn.Exec(t.Context(), r.stdout)
	conn.Close(context.Background())
	if err != nil {
		t.Fatalf("applying the script: %v", err)
	}

	env := dbEnv(url)
	if st := run(t, t.TempDir(), env, "migrate", "status"); st.code != 0 || !strings.Contains(st.stdout, "queue  version 10 of 10, clean") ||
		!strings.Contains(st.stdout, "fleet  version 11 of 11, clean") {
		t.Fatalf("status after the script: %+v", st)
	}
	if m := run(t, t.TempDir(), env, "migrate"); m.code != 0 || !strings.Contains(m.stdout, "nothing to migrate") {
		t.Fatalf("migrate after the script: %+v", m)
	}
	if d := run(t, t.TempDir(), env, "dispatch", "--name", "demo.noop"); d.code != 0 {
		t.Fatalf("dispatch on the scripted database: %+v", d)
	}
}
