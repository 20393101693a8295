package cmd_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/pgtest"
)

// 20 app dispatch processes started at once with one unique key insert one
// job; every other one says which job holds the key. Once that job has
// completed, a new dispatch inside the period is a duplicate only with
// --unique-completed.
func TestDispatchUniqueFromTwentyProcesses(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	args := []string{"dispatch", "--name", "demo.noop", "--unique-key", "nightly", "--unique-for", "1h", "--unique-completed"}
	apps := make([]*apptest.App, 20)
	for i := range apps {
		apps[i] = apptest.Start(t, dir, dbEnv(url), args...)
	}
	dispatched, duplicates := 0, 0
	holder := regexp.MustCompile(`^not dispatched: job (\d+) \(demo.noop\) holds its unique key$`)
	var held []string
	for _, a := range apps {
		select {
		case <-a.Done:
		case <-time.After(60 * time.Second):
			t.Fatal("a dispatch did not finish within 60 s")
		}
		out := strings.TrimSpace(a.Output())
		switch {
		case a.Cmd.ProcessState.ExitCode() != 0:
			t.Errorf("dispatch exited %d: %s", a.Cmd.ProcessState.ExitCode(), out)
		case strings.HasPrefix(out, "dispatched 1 demo.noop job(s)"):
			dispatched++
		case holder.MatchString(out):
			duplicates++
			held = append(held, holder.FindStringSubmatch(out)[1])
		default:
			t.Errorf("unexpected output: %q", out)
		}
	}
	if dispatched != 1 || duplicates != 19 {
		t.Fatalf("%d dispatched and %d duplicates, want 1 and 19", dispatched, duplicates)
	}
	for _, h := range held {
		if h != held[0] {
			t.Errorf("duplicates name jobs %v, want one job", held)
			break
		}
	}
	if n := query(t, url, `SELECT count(*) FROM queue_jobs`); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	if r := run(t, dir, dbEnv(url), "fleet:job", held[0]); r.code != 0 || !regexp.MustCompile(`unique key\s+demo\.noop\|k=nightly\|p=\d+`).MatchString(r.stdout) {
		t.Errorf("fleet:job does not show the unique key: %+v", r)
	}
	if r := run(t, dir, dbEnv(url), "fleet:work", "--stop-when-empty"); r.code != 0 {
		t.Fatalf("fleet:work: %+v", r)
	}
	if r := run(t, dir, dbEnv(url), args...); r.code != 0 || !strings.HasPrefix(r.stdout, "not dispatched: job "+held[0]) {
		t.Errorf("after completion, with --unique-completed: %+v, want a duplicate of job %s", r, held[0])
	}
	plain := []string{"dispatch", "--name", "demo.noop", "--unique-key", "nightly", "--unique-for", "1h"}
	if r := run(t, dir, dbEnv(url), plain...); r.code != 0 || !strings.HasPrefix(r.stdout, "dispatched 1 demo.noop") {
		t.Errorf("after completion, without --unique-completed: %+v, want a new job", r)
	}
	if r := run(t, dir, dbEnv(url), "dispatch", "--name", "demo.noop", "--unique-completed"); r.code == 0 || !strings.Contains(r.stderr, "--unique-for") {
		t.Errorf("--unique-completed alone: %+v, want an error naming --unique-for", r)
	}
}
