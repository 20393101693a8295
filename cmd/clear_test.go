package cmd_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

func TestClearCommand(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	noTTY := func(args ...string) result { return runStdin(t, dir, env, strings.NewReader("y\n"), args...) }
	for _, args := range [][]string{
		{"dispatch", "--name", "demo.noop", "--count", "5", "--queue", "mail"},
		{"dispatch", "--name", "demo.noop", "--count", "2", "--queue", "mail", "--delay", "1h"},
		{"dispatch", "--name", "demo.noop", "--count", "3", "--queue", "mail", "--limit-key", "k", "--limit", "1"},
		{"dispatch", "--name", "demo.noop", "--count", "4"},
	} {
		if r := run(t, dir, env, args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	mail := func() int { return query(t, url, "SELECT count(*) FROM queue_jobs WHERE queue = 'mail'") }

	// Flags at fault are named; without a terminal and without --yes it is
	// refused; nothing is touched.
	for args, want := range map[string]string{
		"fleet:clear":                         "--queue is required",
		"fleet:clear --queue":                 "flag needs an argument: --queue",
		"fleet:clear --queue= --yes":          "--queue must not be empty",
		"fleet:clear --queue mail":            `fleet:clear deletes every job of queue "mail" that is not running: add --yes to confirm (stdin is not a terminal, so it cannot ask), or --dry-run to count them`,
		"fleet:clear --queue mail --colour x": "unknown flag: --colour",
	} {
		r := noTTY(strings.Fields(args)...)
		if r.code != 2 || !strings.Contains(r.stderr, want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: %+v, want exit 2 and one line with %q", args, r, want)
		}
	}
	if n := mail(); n != 10 {
		t.Fatalf("%d mail jobs after refused clears, want 10", n)
	}

	// --dry-run counts and deletes nothing.
	if r := noTTY("fleet:clear", "--queue", "mail", "--dry-run"); r.code != 0 ||
		!strings.Contains(r.stdout, `dry run: would delete 10 job(s) of queue "mail"`) || !strings.Contains(r.stdout, "nothing was changed") {
		t.Fatalf("dry run: %+v", r)
	}
	r := noTTY("fleet:clear", "--queue", "mail", "--dry-run", "--json")
	var dry struct {
		DryRun bool   `json:"dry_run"`
		Queue  string `json:"queue"`
		Would  int    `json:"would_delete"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dry); err != nil || !dry.DryRun || dry.Queue != "mail" || dry.Would != 10 {
		t.Fatalf("dry run --json: %v %+v", err, r)
	}
	if n := mail(); n != 10 {
		t.Fatalf("%d mail jobs after dry runs, want 10", n)
	}

	// --yes deletes them all, and only those of the queue.
	if r := noTTY("fleet:clear", "--queue", "mail", "--yes"); r.code != 0 || !strings.Contains(r.stdout, `deleted 10 job(s) of queue "mail"`) {
		t.Fatalf("clear --yes: %+v", r)
	}
	if n := mail(); n != 0 {
		t.Fatalf("%d mail jobs after the clear", n)
	}
	if n := query(t, url, "SELECT count(*) FROM queue_jobs WHERE queue = 'default'"); n != 4 {
		t.Fatalf("%d default jobs after clearing mail, want 4", n)
	}
	if n := query(t, url, "SELECT COALESCE(sum(active), 0)::int FROM queue_limits"); n != 0 {
		t.Fatalf("%d limit slots held after the clear", n)
	}
	r = noTTY("fleet:clear", "--queue", "default", "--yes", "--json")
	var done struct {
		Deleted int `json:"deleted"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &done); err != nil || done.Deleted != 4 {
		t.Fatalf("clear --json: %v %+v", err, r)
	}
}
