package cmd_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

func TestBulkActionsNeedConfirmation(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"dispatch", "--name", "test.echo", "--count", "3", "--tries", "1", "--payload", `{"token":"hunter2"}`},
		{"dispatch", "--name", "test.echo", "--count", "2", "--tries", "1", "--queue", "mail"},
		{"fleet:work", "--queue", "default,mail", "--stop-when-empty"},
	} {
		if r := run(t, dir, env, args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	failed := func() int { return countJobs(t, url, "queue_failed_jobs") }
	if n := failed(); n != 5 {
		t.Fatalf("%d failed jobs, want 5", n)
	}
	noTTY := func(args ...string) result { return runStdin(t, dir, env, strings.NewReader("y\n"), args...) }

	// Without a terminal and without --yes: refused, nothing touched.
	for _, args := range [][]string{{"fleet:retry", "--all"}, {"fleet:forget", "--all", "--queue", "mail"}} {
		r := noTTY(args...)
		if r.code != 2 || !strings.Contains(r.stderr, "add --yes to confirm (stdin is not a terminal, so it cannot ask)") {
			t.Errorf("%v: %+v", args, r)
		}
	}
	if n := failed(); n != 5 {
		t.Fatalf("%d failed jobs after refused bulk actions", n)
	}

	// A search never matches a redacted value.
	if r := noTTY("fleet:failed", "--search", "hunter2"); r.code != 0 || !strings.Contains(r.stdout, "(no failed jobs)") {
		t.Errorf("search for a hidden value: %+v", r)
	}
	if r := noTTY("fleet:forget", "--all", "--search", "hunter2", "--yes"); r.code != 0 || !strings.Contains(r.stdout, "forgot 0 failed job(s)") {
		t.Errorf("forget by a hidden value: %+v", r)
	}
	if r := noTTY("fleet:failed", "--search", "token", "--json"); r.code != 0 || strings.Count(r.stdout, `"id"`) != 3 {
		t.Errorf("search for a hidden key's name (shown in the error): %+v", r)
	}

	// --dry-run lists what it would touch and touches nothing.
	r := noTTY("fleet:forget", "--all", "--queue", "mail", "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "dry run: would forget 2 failed job(s); nothing was changed") || strings.Count(r.stdout, "mail") != 2 {
		t.Fatalf("dry run: %+v", r)
	}
	r = noTTY("fleet:retry", "--all", "--dry-run", "--json")
	var dry struct {
		DryRun bool `json:"dry_run"`
		Would  int  `json:"would_retry"`
		Jobs   []struct {
			ID int64 `json:"id"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dry); err != nil || !dry.DryRun || dry.Would != 5 || len(dry.Jobs) != 5 || strings.Contains(r.stdout, "hunter2") {
		t.Fatalf("dry run --json: %v %+v", err, r)
	}
	if r := noTTY("fleet:retry", jsonID(dry.Jobs[0].ID), "--dry-run"); r.code != 0 || !strings.Contains(r.stdout, "would retry 1 failed job(s)") {
		t.Fatalf("dry run of one: %+v", r)
	}
	if r := noTTY("fleet:forget", "999999", "--dry-run"); r.code != 3 || !strings.Contains(r.stderr, "no failed job with id 999999") {
		t.Fatalf("dry run of a missing one: %+v", r)
	}
	if n := failed(); n != 5 {
		t.Fatalf("%d failed jobs after dry runs", n)
	}

	// A single id needs no confirmation (the last listed, the oldest, is of
	// queue default); --yes does it all.
	if r := noTTY("fleet:forget", jsonID(dry.Jobs[4].ID)); r.code != 0 {
		t.Fatalf("forget one: %+v", r)
	}
	if r := noTTY("fleet:forget", "--all", "--queue", "mail", "--yes"); r.code != 0 || !strings.Contains(r.stdout, "forgot 2 failed job(s)") {
		t.Fatalf("forget --all --yes: %+v", r)
	}
	if n := failed(); n != 2 {
		t.Fatalf("%d failed jobs left, want 2", n)
	}
}
