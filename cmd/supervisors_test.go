package cmd_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

// TestSupervisorsListsThoseOfLiveMasters: fleet:supervisors lists every
// supervisor of every live master, paused ones marked; a master whose row
// expired is left out.
func TestSupervisorsListsThoseOfLiveMasters(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env, dir := dbEnv(url), t.TempDir()
	if r := run(t, dir, env, "fleet:supervisors"); r.code != 0 || !strings.Contains(r.stdout, "(no supervisor: no live master)") {
		t.Fatalf("without a master: %+v", r)
	}
	query(t, url, `WITH i AS (INSERT INTO fleet_masters (instance, name, host, pid, state, report, expires_at) VALUES
		('i1', 'web-1', 'h', 1, 'running', '{"supervisors":[
			{"name":"exports","queues":["exports","default"],"balance":"auto","paused":true,"processes":{"exports":2,"default":1},"running":3},
			{"name":"mail","queues":["mail"],"balance":"off","processes":{"mail":4},"running":4}]}', now() + interval '1 hour'),
		('i2', 'web-2', 'h', 2, 'running', '{"supervisors":[{"name":"mail","queues":["mail"],"balance":"off","processes":{"mail":1},"running":1}]}', now() + interval '1 hour'),
		('i3', 'gone-1', 'h', 3, 'running', '{"supervisors":[{"name":"old","queues":["default"]}]}', now() - interval '1 minute')
		RETURNING 1) SELECT count(*) FROM i`)
	r := run(t, dir, env, "fleet:supervisors")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "MASTER") || strings.Contains(r.stdout, "gone-1") {
		t.Fatalf("fleet:supervisors: %+v", r)
	}
	for _, want := range [][]string{
		{"web-1", "exports", "paused", "exports,default", "auto", "default:1 exports:2"},
		{"web-1", "mail", "running", "mail", "off", "mail:4"},
		{"web-2", "mail", "running", "mail", "off", "mail:1"},
	} {
		found := false
		for _, l := range lines[1:] {
			if strings.Join(strings.Fields(l), " ") == strings.Join(want, " ") {
				found = true
			}
		}
		if !found {
			t.Errorf("no line %q in:\n%s", strings.Join(want, " "), r.stdout)
		}
	}
	r = run(t, dir, env, "fleet:supervisors", "--json")
	var out struct {
		Supervisors []struct {
			Master     string         `json:"master"`
			Supervisor string         `json:"supervisor"`
			Paused     bool           `json:"paused"`
			Processes  map[string]int `json:"processes"`
		} `json:"supervisors"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || len(out.Supervisors) != 3 {
		t.Fatalf("--json: %+v", r)
	}
	paused := 0
	for _, s := range out.Supervisors {
		if s.Paused {
			paused++
			if s.Master != "web-1" || s.Supervisor != "exports" || s.Processes["exports"] != 2 {
				t.Errorf("paused supervisor: %+v", s)
			}
		}
	}
	if paused != 1 {
		t.Errorf("%d paused supervisors in --json, want 1: %s", paused, r.stdout)
	}
	if r := run(t, dir, env, "fleet:supervisors", "extra"); r.code != 2 {
		t.Errorf("an argument: %+v, want exit 2", r)
	}
}
