package cmd_test

import (
	"strings"
	"testing"

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
			if r.code != 1 || !strings.Contains(r.stderr, "the database is not migrated (or only partly): run `app migrate`") ||
				strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("%s: %v: %+v", stage, args, r)
			}
		}
	}
	// Half-migrated: the queue set is there, the fleet set is not.
	if r := run(t, dir, env, "migrate", "down", "--set", "fleet", "--steps", "3"); r.code != 0 {
		t.Fatalf("down: %+v", r)
	}
	check("half", []string{"fleet:workload"}, []string{"fleet:masters"}, []string{"fleet:job", "1"}, []string{"fleet:jobs", "--completed"})
	// Not migrated at all.
	if r := run(t, dir, env, "migrate", "down", "--set", "queue", "--steps", "3"); r.code != 0 {
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
