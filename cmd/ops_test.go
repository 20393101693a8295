package cmd_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

func TestFailedRetryForgetCommands(t *testing.T) {
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
	must("dispatch", "--name", "test.echo", "--count", "5", "--tries", "2", "--backoff", "0", "--payload", `{"password":"hunter2","to":"ann"}`)
	must("dispatch", "--name", "demo.noop", "--count", "3")
	work := must("fleet:work", "--stop-when-empty")
	if strings.Contains(work.stderr, "hunter2") || !strings.Contains(work.stderr, "[redacted]") {
		t.Fatalf("worker logs leak or do not redact:\n%s", work.stderr)
	}

	type failed struct {
		ID       int64           `json:"id"`
		Attempts int             `json:"attempts"`
		Error    string          `json:"error"`
		Payload  json.RawMessage `json:"payload"`
	}
	list := func() []failed {
		t.Helper()
		r := must("fleet:failed", "--json")
		var page struct {
			Jobs       []failed `json:"failed_jobs"`
			Count      int      `json:"count"`
			Limit      int      `json:"limit"`
			Offset     int      `json:"offset"`
			NextOffset *int     `json:"next_offset"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &page); err != nil {
			t.Fatalf("fleet:failed --json: %v\n%s", err, r.stdout)
		}
		if page.Count != len(page.Jobs) || page.Limit != 100 || page.Offset != 0 || page.NextOffset != nil {
			t.Fatalf("fleet:failed --json paging: count %d limit %d offset %d next %v", page.Count, page.Limit, page.Offset, page.NextOffset)
		}
		out := page.Jobs
		if strings.Contains(r.stdout, "hunter2") {
			t.Fatalf("fleet:failed --json leaks the password:\n%s", r.stdout)
		}
		return out
	}
	jobs := list()
	if len(jobs) != 5 {
		t.Fatalf("%d failed jobs, want 5", len(jobs))
	}
	for _, j := range jobs {
		if j.Attempts != 2 || !strings.HasPrefix(j.Error, "bad input") || !strings.Contains(string(j.Payload), `"[redacted]"`) {
			t.Fatalf("failed job = %+v", j)
		}
	}
	if table := must("fleet:failed", "--search", "ann"); strings.Contains(table.stdout, "hunter2") || strings.Count(table.stdout, "test.echo") != 5 {
		t.Fatalf("fleet:failed table:\n%s", table.stdout)
	}
	if r := must("fleet:retry", "--all", "--yes"); !strings.Contains(r.stdout, "retried 5 failed job(s)") {
		t.Fatalf("retry --all: %+v", r)
	}
	if n := len(list()); n != 0 {
		t.Fatalf("%d failed jobs right after retry --all", n)
	}
	must("fleet:work", "--stop-when-empty")
	again := list()
	if len(again) != 5 || again[0].Attempts != 2 {
		t.Fatalf("after the retry: %+v, want 5 failed again with 2 fresh attempts", again)
	}
	if r := must("fleet:forget", jsonID(again[0].ID)); !strings.Contains(r.stdout, "forgot failed job") {
		t.Fatalf("forget: %+v", r)
	}
	if n := len(list()); n != 4 {
		t.Fatalf("%d failed jobs after forgetting one, want 4", n)
	}
	for _, args := range [][]string{{"fleet:forget", "999999"}, {"fleet:retry", "999999"}} {
		r := run(t, dir, env, args...)
		if r.code != 3 || !strings.Contains(r.stderr, "no failed job with id 999999") {
			t.Errorf("%v: %+v", args, r)
		}
	}
	if r := run(t, dir, env, "fleet:retry", "abc"); r.code == 0 || !strings.Contains(r.stderr, `ID "abc"`) {
		t.Errorf("bad id: %+v", r)
	}
	completed := must("fleet:jobs", "--completed", "--json")
	var donePage struct {
		Attempts   []map[string]any `json:"attempts"`
		Limit      int              `json:"limit"`
		NextOffset *int             `json:"next_offset"`
	}
	err := json.Unmarshal([]byte(completed.stdout), &donePage)
	if done := donePage.Attempts; err != nil || len(done) != 3 || donePage.Limit != 50 || donePage.NextOffset != nil {
		t.Fatalf("completed jobs: %v %s", err, completed.stdout)
	}
	if r := must("fleet:forget", "--all", "--yes"); !strings.Contains(r.stdout, "forgot 4") {
		t.Fatalf("forget --all: %+v", r)
	}
}

func jsonID(id int64) string { b, _ := json.Marshal(id); return string(b) }

func TestWorkloadAndQueuePauseCommands(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"dispatch", "--name", "demo.noop", "--count", "7"},
		{"dispatch", "--name", "demo.noop", "--count", "2", "--queue", "mail", "--delay", "1h"},
		{"dispatch", "--name", "demo.noop", "--count", "1", "--queue", "mail", "--payload", `{"api_key":"hunter2"}`},
		{"fleet:pause", "--queue", "mail"},
	} {
		if r := run(t, dir, env, args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	r := run(t, dir, env, "fleet:workload", "--json")
	var listed struct {
		Queues []struct {
			Queue   string `json:"queue"`
			Pending int    `json:"pending"`
			Delayed int    `json:"delayed"`
			Paused  bool   `json:"paused"`
		} `json:"queues"`
	}
	err := json.Unmarshal([]byte(r.stdout), &listed)
	loads := listed.Queues
	if err != nil || len(loads) != 2 {
		t.Fatalf("workload: %v %+v", err, r)
	}
	if l := loads[0]; l.Queue != "default" || l.Pending != 7 || l.Delayed != 0 || l.Paused {
		t.Errorf("default = %+v", l)
	}
	if l := loads[1]; l.Queue != "mail" || l.Pending != 1 || l.Delayed != 2 || !l.Paused {
		t.Errorf("mail = %+v", l)
	}
	if r := run(t, dir, env, "fleet:workload"); r.code != 0 || !strings.Contains(r.stdout, "mail (paused)") ||
		strings.Contains(r.stdout, "paused supervisors") {
		t.Errorf("workload table: %+v", r)
	}
	// A paused supervisor is named under the table.
	if r := run(t, dir, env, "fleet:pause", "default"); r.code != 0 {
		t.Fatalf("pause default: %+v", r)
	}
	if r := run(t, dir, env, "fleet:workload"); r.code != 0 || !strings.Contains(r.stdout, "paused supervisors: default ") {
		t.Errorf("workload table with a paused supervisor: %+v", r)
	}
	if r := run(t, dir, env, "fleet:continue", "default"); r.code != 0 {
		t.Fatalf("continue default: %+v", r)
	}
	pending := run(t, dir, env, "fleet:jobs", "--pending", "--queue", "mail")
	if pending.code != 0 || strings.Contains(pending.stdout, "hunter2") || !strings.Contains(pending.stdout, "[redacted]") {
		t.Errorf("pending jobs: %+v", pending)
	}
	if r := run(t, dir, env, "fleet:continue", "--queue", "mail"); r.code != 0 {
		t.Fatalf("continue: %+v", r)
	}
	if r := run(t, dir, env, "fleet:jobs"); r.code == 0 || !strings.Contains(r.stderr, "--pending or --completed") {
		t.Errorf("fleet:jobs without a kind: %+v", r)
	}
	if r := run(t, dir, env, "fleet:masters", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"masters": []`) || !strings.Contains(r.stdout, `"at": "`) {
		t.Errorf("masters: %+v", r)
	}
	if r := run(t, dir, env, "fleet:metrics", "--period", "month"); r.code == 0 || !strings.Contains(r.stderr, "--period: period must be hour, day or week") {
		t.Errorf("metrics with a bad period: %+v", r)
	}
	if r := run(t, dir, env, "fleet:metrics", "--json"); r.code != 0 || strings.Join(strings.Fields(r.stdout), "") != `{"metrics":[]}` {
		t.Errorf("metrics: %+v", r)
	}
}
