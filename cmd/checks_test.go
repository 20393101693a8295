package cmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

func TestArgumentsAreCheckedAlikeEverywhere(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	long := strings.Repeat("q", 201)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"dispatch", "--name", " "}, "--name must not be empty"},
		{[]string{"dispatch", "--name", "a\nb"}, `--name "a\nb" must not contain control characters`},
		{[]string{"dispatch", "--name", strings.Repeat("n", 501)}, "--name must be at most 500 bytes, got 501"},
		{[]string{"dispatch", "--name", "x", "--queue", ""}, "--queue must not be empty"},
		{[]string{"dispatch", "--name", "x", "--queue", "a\tb"}, "--queue"},
		{[]string{"dispatch", "--name", "x", "--queue", long}, "--queue must be at most 200 bytes, got 201"},
		{[]string{"dispatch", "--name", "x", "--tries", "0"}, "--tries must be at least 1, got 0"},
		{[]string{"dispatch", "--name", "x", "--tries", "-2"}, "--tries must be at least 1, got -2"},
		{[]string{"fleet:failed", "--limit", "-1"}, "--limit must be at least 1, got -1"},
		{[]string{"fleet:failed", "--limit", "0"}, "--limit must be at least 1, got 0"},
		{[]string{"fleet:failed", "--offset", "-1"}, "--offset must be at least 0, got -1"},
		{[]string{"fleet:failed", "--queue", " "}, "--queue must not be empty"},
		{[]string{"fleet:jobs", "--pending", "--limit", "0"}, "--limit must be at least 1, got 0"},
		{[]string{"fleet:jobs", "--completed", "--offset", "-5"}, "--offset must be at least 0, got -5"},
		{[]string{"fleet:jobs", "--pending", "--queue", "a\x00"}, "--queue"},
		{[]string{"fleet:retry", "--all", "--queue", ""}, "--queue must not be empty"},
		{[]string{"fleet:forget", "--all", "--queue", "\n"}, "--queue must not be empty"},
		{[]string{"fleet:pause", "--queue", ""}, "--queue must not be empty"},
		{[]string{"fleet:continue", "--queue", "a\nb"}, "--queue"},
		{[]string{"fleet:clear", "--queue", "a\nb", "--yes"}, `--queue "a\nb" must not contain control characters`},
	}
	for _, c := range cases {
		r := run(t, dir, env, c.args...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%q: %+v, want one line containing %q", c.args, r, c.want)
		}
	}
	if n := countJobs(t, url, "queue_jobs"); n != 0 {
		t.Fatalf("%d jobs inserted", n)
	}
	// Beside the record of the tables' creation.
	if n := countJobs(t, url, "fleet_state WHERE key <> 'tables:created'"); n != 0 {
		t.Fatalf("%d state rows written: an empty --queue paused something", n)
	}
	// Limits at their bounds pass.
	for _, args := range [][]string{
		{"dispatch", "--name", strings.Repeat("n", 500), "--queue", strings.Repeat("q", 200), "--tries", "1"},
		{"fleet:failed", "--limit", "1", "--offset", "0"},
		{"fleet:jobs", "--pending", "--limit", "1"},
	} {
		if r := run(t, dir, env, args...); r.code != 0 {
			t.Errorf("%.60q: %+v", args, r)
		}
	}
}

func TestPauseOfAQueueNobodyWorksWarns(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := append(dbEnv(url), "APP_QUEUE__QUEUES=default,mail")
	dir := t.TempDir()
	r := run(t, dir, env, "fleet:pause", "--queue", "mial")
	if r.code != 0 || !strings.Contains(r.stderr, `warning: no supervisor in this app's configuration works queue "mial" (they work: default, mail)`) ||
		!strings.Contains(r.stdout, "paused queue mial") {
		t.Fatalf("pause of an unworked queue: %+v", r)
	}
	if n := countJobs(t, url, "fleet_state WHERE key = 'pause:queue:mial'"); n != 1 {
		t.Fatalf("pause not stored (%d rows)", n)
	}
	if r := run(t, dir, env, "fleet:pause", "--queue", "mail"); r.code != 0 || r.stderr != "" {
		t.Fatalf("pause of a worked queue: %+v", r)
	}
	if r := run(t, dir, env, "fleet:continue", "--queue", "mial"); r.code != 0 || r.stderr != "" {
		t.Fatalf("continue: %+v", r)
	}
}

func TestTheAppsOwnVariablesAreIgnored(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := append(dbEnv(url), "APP_SECRET_KEY=x", "APP_DEBUG=1", "APP_MAILER__HOST=smtp")
	if r := run(t, t.TempDir(), env, "fleet:workload"); r.code != 0 {
		t.Fatalf("with the app's own variables: %+v", r)
	}
	r := run(t, t.TempDir(), append(env, "APP_QUEUE__WORKRS=3"), "fleet:workload")
	if r.code == 0 || !strings.Contains(r.stderr, "environment APP_QUEUE__WORKRS: unknown key queue.workrs") {
		t.Fatalf("a misspelt key: %+v", r)
	}
}

// fleet:pause exports; fleet:pause; fleet:continue exports: the continue is
// refused (every supervisor is paused) and changes nothing, so exports is
// still paused on its own once all are continued.
func TestRefusedContinueKeepsThePause(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "[fleet.supervisors.exports]\nqueues = [\"exports\"]\n[fleet.supervisors.web]\nqueues = [\"default\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "config", "app.toml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"fleet:pause", "exports"}, {"fleet:pause"}} {
		if r := run(t, dir, env, args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	r := run(t, dir, env, "fleet:continue", "exports")
	if r.code == 0 || !strings.Contains(r.stderr, "every supervisor is paused") {
		t.Fatalf("continue one while all are paused: %+v", r)
	}
	if n := countJobs(t, url, "fleet_state WHERE key = 'pause:supervisor:exports'"); n != 1 {
		t.Fatalf("the refused continue removed the exports pause (%d rows)", n)
	}
	if r := run(t, dir, env, "fleet:continue"); r.code != 0 {
		t.Fatalf("continue all: %+v", r)
	}
	if n := countJobs(t, url, "fleet_state WHERE key LIKE 'pause:%'"); n != 0 {
		t.Fatalf("%d pauses left after continuing all", n)
	}
}
