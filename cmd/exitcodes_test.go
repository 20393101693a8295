package cmd_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/migrations"
	"github.com/fleet-go/fleet/pgtest"
)

// TestExitCodes: each kind of failure has its own exit status, the one
// docs/operating.md lists.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"fleet:workload"}, 0, ""},
		// Usage: cobra's own checks and the commands' checks of their flags.
		{[]string{"fleet:nosuch"}, 2, `unknown command "fleet:nosuch"`},
		{[]string{"fleet:workload", "--colour", "red"}, 2, "unknown flag: --colour"},
		{[]string{"fleet:job"}, 2, "accepts 1 arg(s), received 0"},
		{[]string{"fleet:job", "1", "2"}, 2, "accepts 1 arg(s), received 2"},
		{[]string{"dispatch"}, 2, `required flag(s) "name" not set`},
		{[]string{"dispatch", "--name", "x", "--count", "0"}, 2, "--count must be at least 1"},
		{[]string{"fleet:job", "abc"}, 2, `ID "abc" is not a job's id`},
		{[]string{"fleet:token"}, 2, "give a subcommand"},
		{[]string{"fleet:token", "create", "--name", "x", "--ability", "root"}, 2, "--ability"},
		// Not found.
		{[]string{"fleet:job", "999999"}, 3, "no job with id 999999"},
		{[]string{"fleet:job", "--failed", "999999"}, 3, "no failed job with id 999999"},
		{[]string{"fleet:retry", "999999"}, 3, "no failed job with id 999999"},
		{[]string{"fleet:cancel", "999999"}, 3, "no queued job with id 999999"},
		{[]string{"fleet:token", "revoke", "nope"}, 3, `no token named "nope"`},
		{[]string{"fleet:pause", "nope"}, 3, `no supervisor named "nope"`},
		// No master: 1, as fleet:status always did.
		{[]string{"fleet:status"}, 1, "no fleet master is live"},
	}
	for _, c := range cases {
		r := run(t, dir, env, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: %+v, want exit %d and %q", c.args, r, c.code, c.want)
		}
	}
	// Unreachable: nothing listens on port 1.
	down := dbEnv("postgres://app:hunter2@127.0.0.1:1/app?connect_timeout=2")
	for _, args := range [][]string{{"migrate"}, {"fleet:status"}, {"fleet:job", "1"}} {
		r := run(t, dir, down, args...)
		if r.code != 4 || strings.Contains(r.stderr, "hunter2") {
			t.Errorf("%v against a database that is down: %+v, want exit 4", args, r)
		}
	}
	// Usage wins over the database: a bad flag is refused before any
	// connection is tried.
	if r := run(t, dir, down, "fleet:job", "abc"); r.code != 2 {
		t.Errorf("a bad id against a database that is down: %+v, want exit 2", r)
	}
	// Not migrated: the fleet set taken down.
	steps, err := migrations.Count("fleet")
	if err != nil {
		t.Fatal(err)
	}
	if r := run(t, dir, env, "migrate", "down", "--set", "fleet", "--steps", strconv.Itoa(steps)); r.code != 0 {
		t.Fatalf("down: %+v", r)
	}
	if r := run(t, dir, env, "fleet:masters"); r.code != 5 || !strings.Contains(r.stderr, "not migrated") {
		t.Errorf("fleet:masters on a half-migrated database: %+v, want exit 5", r)
	}
}

// TestMigrateStatusExitsNonZeroWhilePendingOrDirty: `migrate status` exits 7
// while a set is behind or dirty, with --json too, and 0 once it is not.
func TestMigrateStatusExitsNonZeroWhilePendingOrDirty(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	if r := run(t, dir, env, "migrate", "status"); r.code != 0 {
		t.Fatalf("status when up to date: %+v", r)
	}
	if r := run(t, dir, env, "migrate", "down", "--set", "fleet", "--steps", "1"); r.code != 0 {
		t.Fatalf("down: %+v", r)
	}
	if r := run(t, dir, env, "migrate", "status"); r.code != 7 || !strings.Contains(r.stdout, "1 pending") || r.stderr != "" {
		t.Fatalf("status with one pending: %+v, want exit 7", r)
	}
	if r := run(t, dir, env, "migrate", "status", "--json"); r.code != 7 || !strings.Contains(r.stdout, `"sets"`) {
		t.Fatalf("status --json with one pending: %+v, want exit 7", r)
	}
	if r := run(t, dir, env, "migrate"); r.code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	if r := run(t, dir, env, "migrate", "status"); r.code != 0 {
		t.Fatalf("status after migrate: %+v", r)
	}
	// Dirty: a migration that failed half-way leaves the flag set.
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "UPDATE queue_schema_migrations SET dirty = true"); err != nil {
		t.Fatal(err)
	}
	if r := run(t, dir, env, "migrate", "status"); r.code != 7 || !strings.Contains(r.stdout, "DIRTY") {
		t.Fatalf("status with a dirty set: %+v, want exit 7", r)
	}
}
