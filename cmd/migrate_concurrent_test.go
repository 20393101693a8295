package cmd_test

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fleet-go/fleet/migrations"
	"github.com/fleet-go/fleet/pgtest"
)

// TestConcurrentMigrateRunsReportOnlyTheirOwn: five `app migrate` at once
// on an empty database apply every migration once between them, and each
// reports only what it applied itself.
func TestConcurrentMigrateRunsReportOnlyTheirOwn(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	total := 0
	for _, set := range []string{"fleet", "queue"} {
		n, err := migrations.Count(set)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if r := run(t, t.TempDir(), env, "migrate", "down", "--set", set, "--steps", strconv.Itoa(n)); r.code != 0 {
			t.Fatalf("down %s: %+v", set, r)
		}
	}
	const runs = 5
	results := make([]result, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() { results[i] = run(t, t.TempDir(), env, "migrate") })
	}
	wg.Wait()
	appliedRE := regexp.MustCompile(`applied (\d+) migration\(s\)`)
	sum := 0
	for i, r := range results {
		if r.code != 0 {
			t.Fatalf("run %d: %+v", i, r)
		}
		if m := appliedRE.FindStringSubmatch(r.stdout); m != nil {
			n, _ := strconv.Atoi(m[1])
			sum += n
		} else if !strings.Contains(r.stdout, "nothing to migrate") {
			t.Fatalf("run %d says neither what it applied nor that nothing was left: %+v", i, r)
		}
	}
	if sum != total {
		t.Fatalf("the runs report %d migrations applied in all, want %d (each once):\n%+v", sum, total, results)
	}
	if r := run(t, t.TempDir(), env, "migrate", "status"); r.code != 0 {
		t.Fatalf("status after the runs: %+v", r)
	}
}
