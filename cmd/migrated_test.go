package cmd_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/cmd"
	"github.com/fleet-go/fleet/migrations"
	"github.com/fleet-go/fleet/pgtest"
)

func TestUnmigratedDatabaseSaysRunMigrate(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	check := func(stage string, cmds ...[]string) {
		t.Helper()
		for _, args := range cmds {
			r := run(t, dir, env, args...)
			if r.code != 5 || !strings.Contains(r.stderr, "the database is not migrated (or only partly): run `app migrate`") ||
				strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("%s: %v: %+v", stage, args, r)
			}
		}
	}
	// Half-migrated: the queue set is there, the fleet set is not.
	steps, err := migrations.Count("fleet")
	if err != nil {
		t.Fatal(err)
	}
	if r := run(t, dir, env, "migrate", "down", "--set", "fleet", "--steps", strconv.Itoa(steps)); r.code != 0 {
		t.Fatalf("down: %+v", r)
	}
	check("half", []string{"fleet:workload"}, []string{"fleet:masters"}, []string{"fleet:job", "1"}, []string{"fleet:jobs", "--completed"})
	// Not migrated at all.
	queueSteps, err := migrations.Count("queue")
	if err != nil {
		t.Fatal(err)
	}
	if r := run(t, dir, env, "migrate", "down", "--set", "queue", "--steps", strconv.Itoa(queueSteps)); r.code != 0 {
		t.Fatalf("down: %+v", r)
	}
	check("none", []string{"dispatch", "--name", "x"}, []string{"fleet:failed"}, []string{"fleet:jobs", "--pending"},
		[]string{"fleet:retry", "--all", "--yes"})
	if r := run(t, dir, env, "migrate"); r.code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	if r := run(t, dir, env, "fleet:workload"); r.code != 0 {
		t.Fatalf("after migrate: %+v", r)
	}
}

// TestAppsOwnMissingTableIsNotNotMigrated: an app command whose own SQL
// names a missing table of the app's gets PostgreSQL's error, not "run app
// migrate"; one naming a missing table of fleet's gets the advice.
func TestAppsOwnMissingTableIsNotNotMigrated(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t) // migrated: every fleet table is there
	query := func() []*cobra.Command {
		return []*cobra.Command{{Use: "report", Args: cobra.ExactArgs(1), RunE: func(c *cobra.Command, args []string) error {
			conn, err := pgx.Connect(c.Context(), url)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			_, err = conn.Exec(c.Context(), "SELECT * FROM "+args[0])
			return err
		}}}
	}
	exec := func(table string) (int, string) {
		var out, errb bytes.Buffer
		code := cmd.ExecuteContext(t.Context(), cmd.App{Commands: query, Args: []string{"report", table}, Stdout: &out, Stderr: &errb, Environ: []string{}})
		return code, errb.String()
	}
	code, stderr := exec("orders")
	if code != 1 || strings.Contains(stderr, "not migrated") || !strings.Contains(stderr, `relation "orders" does not exist (SQLSTATE 42P01)`) {
		t.Errorf("the app's own table: %d %q", code, stderr)
	}
	code, stderr = exec("fleet_nosuch")
	if code != 5 || !strings.Contains(stderr, "the database is not migrated (or only partly): run `app migrate`") {
		t.Errorf("a table of fleet's: %d %q", code, stderr)
	}
}
