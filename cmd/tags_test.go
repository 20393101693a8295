package cmd_test

import (
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

// dispatch takes a priority, tags and metadata, refusing bad ones by the
// flag's name; fleet:jobs lists a queue in run order and filters by tag;
// fleet:job shows them.
func TestDispatchPriorityTagsAndMetadata(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--priority", "101"}, "--priority must be between -100 and 100, got 101"},
		{[]string{"--tag", ""}, "--tag[0] must not be empty"},
		{[]string{"--tag", "a\tb"}, "--tag[0]"},
		{[]string{"--meta", "[1]"}, "--meta must be a JSON object"},
		{[]string{"--meta", "{"}, "--meta must be a JSON object"},
	} {
		r := run(t, dir, env, append([]string{"dispatch", "--name", "x"}, tt.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("dispatch %v: %+v, want an error containing %q", tt.args, r, tt.want)
		}
	}
	for _, args := range [][]string{
		{"--name", "low", "--priority", "5"},
		{"--name", "urgent", "--priority", "-5", "--tag", "tenant:42", "--tag", "vip", "--meta", `{"source":"shell"}`},
		{"--name", "normal", "--tag", "tenant:7"},
	} {
		if r := run(t, dir, env, append([]string{"dispatch"}, args...)...); r.code != 0 {
			t.Fatalf("dispatch %v: %+v", args, r)
		}
	}
	r := run(t, dir, env, "fleet:jobs", "--pending", "--queue", "default")
	urgent, normal, low := strings.Index(r.stdout, "urgent"), strings.Index(r.stdout, "normal"), strings.Index(r.stdout, "low")
	if r.code != 0 || urgent < 0 || !(urgent < normal && normal < low) || !strings.Contains(r.stdout, "tenant:42,vip") {
		t.Fatalf("fleet:jobs --pending --queue default, want urgent, normal, low in that order with tags: %+v", r)
	}
	r = run(t, dir, env, "fleet:jobs", "--pending", "--tag", "tenant:42")
	if r.code != 0 || !strings.Contains(r.stdout, "urgent") || strings.Contains(r.stdout, "normal") || strings.Contains(r.stdout, "low") {
		t.Fatalf("fleet:jobs --pending --tag tenant:42: %+v", r)
	}
	if r := run(t, dir, env, "fleet:jobs", "--completed", "--tag", "x"); r.code == 0 || !strings.Contains(r.stderr, "--tag goes with --pending") {
		t.Fatalf("fleet:jobs --completed --tag: %+v", r)
	}
	if r := run(t, dir, env, "fleet:failed", "--tag", "x\ny"); r.code == 0 || !strings.Contains(r.stderr, "--tag") {
		t.Fatalf("fleet:failed with a bad tag: %+v", r)
	}
	if r := run(t, dir, env, "fleet:failed", "--tag", "tenant:42"); r.code != 0 || !strings.Contains(r.stdout, "(no failed jobs)") {
		t.Fatalf("fleet:failed --tag tenant:42: %+v", r)
	}
	r = run(t, dir, env, "fleet:job", "2")
	if r.code != 0 || !strings.Contains(r.stdout, "priority") || !strings.Contains(r.stdout, "-5") ||
		!strings.Contains(r.stdout, "tenant:42, vip") || !strings.Contains(r.stdout, `{"source":"shell"}`) {
		t.Fatalf("fleet:job 2: %+v", r)
	}
}
