package cmd_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

func TestCancelCommand(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	must := func(args ...string) result {
		t.Helper()
		r := run(t, dir, env, args...)
		if r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
		return r
	}
	must("dispatch", "--name", "demo.noop", "--count", "2")
	must("dispatch", "--name", "demo.noop", "--delay", "1h")
	must("dispatch", "--name", "demo.noop", "--queue", "mail", "--count", "4")

	// Two jobs by id and one that is not there: exit 3 (not found), naming it.
	r := run(t, dir, env, "fleet:cancel", "1", "3", "999999")
	if r.code != 3 || !strings.Contains(r.stdout, "job 1: cancelled") || !strings.Contains(r.stdout, "job 3: cancelled") ||
		!strings.Contains(r.stdout, "job 999999: not found") || !strings.Contains(r.stderr, "no queued job with id 999999") {
		t.Fatalf("fleet:cancel 1 3 999999: %+v", r)
	}
	var res struct {
		Jobs []struct {
			ID      int64  `json:"id"`
			Outcome string `json:"outcome"`
		} `json:"jobs"`
		NotFound []int64 `json:"not_found"`
	}
	out := must("fleet:cancel", "2", "--json")
	if err := json.Unmarshal([]byte(out.stdout), &res); err != nil || len(res.Jobs) != 1 || res.Jobs[0].Outcome != "cancelled" || len(res.NotFound) != 0 {
		t.Fatalf("fleet:cancel --json: %v\n%s", err, out.stdout)
	}
	if r := run(t, dir, env, "fleet:cancel", "abc"); r.code == 0 || !strings.Contains(r.stderr, `ID "abc"`) {
		t.Fatalf("a bad id: %+v", r)
	}
	// fleet:job says who cancelled the job and when.
	story := must("fleet:job", "1")
	if !strings.Contains(story.stdout, "cancelled at") || !strings.Contains(story.stdout, "cancelled by ") ||
		!strings.Contains(story.stdout, "(fleet:cancel)") {
		t.Fatalf("fleet:job of a cancelled job:\n%s", story.stdout)
	}

	// A whole queue: guarded like fleet:retry --all.
	if r := run(t, dir, env, "fleet:cancel", "--queue", "mail", "--all"); r.code == 0 || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("--all without --yes off a terminal: %+v", r)
	}
	if r := must("fleet:cancel", "--queue", "mail", "--all", "--dry-run"); !strings.Contains(r.stdout, "would cancel 4 waiting job(s)") {
		t.Fatalf("--dry-run: %+v", r)
	}
	if n := countJobs(t, url, "queue_jobs"); n != 4 {
		t.Fatalf("%d jobs after the dry run, want 4", n)
	}
	if r := must("fleet:cancel", "--queue", "mail", "--all", "--yes"); !strings.Contains(r.stdout, `cancelled 4 job(s) of queue "mail"`) {
		t.Fatalf("--all --yes: %+v", r)
	}
	if n := countJobs(t, url, "queue_jobs"); n != 0 {
		t.Fatalf("%d jobs left", n)
	}
	if r := run(t, dir, env, "fleet:cancel", "--all"); r.code == 0 || !strings.Contains(r.stderr, "--queue") {
		t.Fatalf("--all without --queue: %+v", r)
	}
}
