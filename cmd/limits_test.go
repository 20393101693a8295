package cmd_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

func TestDispatchWithALimitShowsLimitedJobs(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--limit-key", "k"}, "--limit-key and --limit go together"},
		{[]string{"--limit", "2"}, "--limit-key and --limit go together"},
		{[]string{"--limit-key", "k", "--limit", "0"}, "--limit must be at least 1, got 0"},
		{[]string{"--limit-key", " ", "--limit", "2"}, "--limit-key must not be empty"},
	} {
		r := run(t, dir, env, append([]string{"dispatch", "--name", "x"}, tt.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("dispatch %v: %+v, want an error containing %q", tt.args, r, tt.want)
		}
	}
	r := run(t, dir, env, "dispatch", "--name", "x", "--count", "5", "--limit-key", "tenant:42", "--limit", "2", "--json")
	if r.code != 0 {
		t.Fatalf("dispatch: %+v", r)
	}
	var out struct {
		Dispatched struct {
			LastID int64 `json:"last_id"`
		} `json:"dispatched"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	r = run(t, dir, env, "fleet:workload", "--json")
	var listed struct {
		Queues []struct {
			Queue                               string
			Pending, Delayed, Limited, Reserved int64
		}
	}
	err := json.Unmarshal([]byte(r.stdout), &listed)
	loads := listed.Queues
	if err != nil || len(loads) != 1 {
		t.Fatalf("workload: %v, %+v", err, r)
	}
	if l := loads[0]; l.Pending != 2 || l.Delayed != 0 || l.Limited != 3 {
		t.Fatalf("workload %+v, want 2 pending, 0 delayed, 3 limited", l)
	}
	r = run(t, dir, env, "fleet:workload")
	if !strings.Contains(r.stdout, "LIMITED") {
		t.Fatalf("workload table has no LIMITED column:\n%s", r.stdout)
	}
	r = run(t, dir, env, "fleet:job", strconv.FormatInt(out.Dispatched.LastID, 10))
	if r.code != 0 || !strings.Contains(r.stdout, `limited: waiting for a slot of limit key "tenant:42"`) ||
		!strings.Contains(r.stdout, `key "tenant:42", at most 2 at once (2 ready or running now); this job waits for a slot`) {
		t.Fatalf("fleet:job of a limited job:\n%s\n%s", r.stdout, r.stderr)
	}
	r = run(t, dir, env, "fleet:job", strconv.FormatInt(out.Dispatched.LastID-4, 10), "--json")
	var story struct {
		State string
		Limit *struct {
			Key     string
			Limit   int
			Waiting bool
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &story); err != nil || story.State != "pending" || story.Limit == nil ||
		story.Limit.Key != "tenant:42" || story.Limit.Limit != 2 || story.Limit.Waiting {
		t.Fatalf("fleet:job --json of a job holding a slot: %v, %s", err, r.stdout)
	}
}
