package cmd_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/pgtest"
)

// story is the part of fleet:job --json the tests read.
type story struct {
	ID       int64           `json:"id"`
	Name     string          `json:"name"`
	Queue    string          `json:"queue"`
	State    string          `json:"state"`
	Payload  json.RawMessage `json:"payload"`
	Tries    int             `json:"tries"`
	RetryOf  *int64          `json:"retry_of"`
	Reserved *struct {
		Worker, Master, MasterInstance string
	} `json:"reserved"`
	Failed *struct {
		ID    int64  `json:"id"`
		Error string `json:"error"`
	} `json:"failed"`
	Retries []struct {
		JobID int64  `json:"job_id"`
		State string `json:"state"`
	} `json:"retries"`
	Attempts []struct {
		Attempt int    `json:"attempt"`
		Status  string `json:"status"`
		Worker  string `json:"worker"`
		Error   string `json:"error"`
	} `json:"attempts"`
}

var dispatchedIDs = regexp.MustCompile(`ids (\d+)\.\.(\d+)`)

// firstID returns the first id a dispatch printed.
func firstID(t *testing.T, r result) int64 {
	t.Helper()
	m := dispatchedIDs.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no ids in %q", r.stdout)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	return id
}

func sqlExec(t *testing.T, url, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestJobStory(t *testing.T) {
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
		if strings.Contains(r.stdout, "hunter2") {
			t.Fatalf("%v leaks the secret:\n%s", args, r.stdout)
		}
		return r
	}
	get := func(args ...string) story {
		t.Helper()
		r := must(append(append([]string{"fleet:job"}, args...), "--json")...)
		var s story
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, r.stdout)
		}
		return s
	}

	failing := firstID(t, must("dispatch", "--name", "test.echo", "--tries", "2", "--backoff", "0", "--payload", `{"password":"hunter2","to":"ann"}`))
	done := firstID(t, must("dispatch", "--name", "demo.noop", "--queue", "mail"))
	must("fleet:work", "--queue", "default,mail", "--stop-when-empty")
	delayed := firstID(t, must("dispatch", "--name", "demo.noop", "--delay", "1h"))
	held := firstID(t, must("dispatch", "--name", "demo.noop", "--queue", "held"))

	// A failed job: both attempts, payload and errors redacted.
	f := get(jsonID(failing))
	if f.State != "failed" || f.Name != "test.echo" || f.Failed == nil || len(f.Attempts) != 2 ||
		f.Attempts[0].Status != "failed" || f.Attempts[1].Attempt != 2 || f.Attempts[0].Worker == "" ||
		!strings.Contains(string(f.Payload), `"[redacted]"`) || !strings.Contains(f.Failed.Error, "[redacted]") {
		t.Fatalf("failed job story = %+v", f)
	}
	// The same story through the failed job's id.
	if byFailed := get("--failed", jsonID(f.Failed.ID)); byFailed.ID != failing || byFailed.State != "failed" {
		t.Fatalf("by failed id = %+v", byFailed)
	}
	table := must("fleet:job", jsonID(failing))
	for _, want := range []string{"state", "failed at", "ATTEMPT", "STATUS", "[redacted]", "test.echo"} {
		if !strings.Contains(table.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, table.stdout)
		}
	}

	// Retried: the retry names the original, the original its retry.
	r := must("fleet:retry", jsonID(f.Failed.ID), "--json")
	var retried struct {
		JobID int64 `json:"job_id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &retried); err != nil {
		t.Fatal(err)
	}
	if s := get(jsonID(retried.JobID)); s.State != "pending" || s.RetryOf == nil || *s.RetryOf != failing || s.Tries != 0 {
		t.Fatalf("retry story = %+v", s)
	}
	if s := get(jsonID(failing)); s.State != "retried" || len(s.Retries) != 1 || s.Retries[0].JobID != retried.JobID || len(s.Attempts) != 2 {
		t.Fatalf("original after retry = %+v", s)
	}

	if s := get(jsonID(done)); s.State != "completed" || s.Queue != "mail" || len(s.Attempts) != 1 || s.Attempts[0].Status != "completed" {
		t.Fatalf("completed story = %+v", s)
	}
	if s := get(jsonID(delayed)); s.State != "delayed" || len(s.Attempts) != 0 {
		t.Fatalf("delayed story = %+v", s)
	}
	if tb := must("fleet:job", jsonID(delayed)); !strings.Contains(tb.stdout, "delayed until") || !strings.Contains(tb.stdout, "(no recorded attempt)") {
		t.Fatalf("delayed table:\n%s", tb.stdout)
	}

	// Reserved by a worker of a master whose member row exists: its name.
	sqlExec(t, url, `INSERT INTO fleet_masters (instance, kind, name, host, pid, expires_at) VALUES ('inst-1', 'master', 'web-1', 'web', 1, now() + interval '1 hour')`)
	sqlExec(t, url, `UPDATE queue_jobs SET reserved_by = 'web:1:w', reserved_master = 'inst-1', reserved_at = now(), attempts = 1 WHERE id = $1`, held)
	if s := get(jsonID(held)); s.State != "reserved" || s.Reserved == nil || s.Reserved.Worker != "web:1:w" || s.Reserved.Master != "web-1" {
		t.Fatalf("reserved story = %+v", s)
	}
	if tb := must("fleet:job", jsonID(held)); !strings.Contains(tb.stdout, "reserved by worker web:1:w of master web-1 (inst-1) since") {
		t.Fatalf("reserved table:\n%s", tb.stdout)
	}

	// Ids nobody knows.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"999999"}, 3, "no job with id 999999"},
		{[]string{"--failed", "999999"}, 3, "no failed job with id 999999"},
		{[]string{"abc"}, 2, `ID "abc" is not a job's id`},
	} {
		r := run(t, dir, env, append([]string{"fleet:job"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: %+v, want exit %d and %q", c.args, r, c.code, c.want)
		}
	}
}
