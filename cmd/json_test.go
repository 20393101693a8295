package cmd_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

func TestEveryCommandSpeaksJSON(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"migrate"}, {"migrate", "status"}, {"migrate", "down"}, {"dispatch"}, {"version"},
		{"fleet:status"}, {"fleet:pause"}, {"fleet:continue"}, {"fleet:terminate"}, {"fleet:workload"}, {"fleet:masters"},
		{"fleet:failed"}, {"fleet:retry"}, {"fleet:forget"}, {"fleet:cancel"}, {"fleet:jobs"}, {"fleet:job"}, {"fleet:metrics"}, {"fleet:periodic"},
		{"fleet:clear"}, {"fleet:trim"},
	} {
		r := run(t, t.TempDir(), nil, append(args, "--help")...)
		if r.code != 0 || !strings.Contains(r.stdout, "--json") {
			t.Errorf("%v has no --json:\n%s", args, r.stdout)
		}
	}
}

func TestJSONOfStateAndChanges(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := append(dbEnv(url), "APP_FLEET__SUPERVISORS__EXPORTS__QUEUES=exports", "APP_FLEET__SUPERVISORS__DEFAULT__QUEUES=default,mail")
	dir := t.TempDir()
	js := func(wantCode int, args ...string) map[string]any {
		t.Helper()
		r := run(t, dir, env, append(args, "--json")...)
		var v map[string]any
		if r.code != wantCode || json.Unmarshal([]byte(r.stdout), &v) != nil {
			t.Fatalf("%v: %+v", args, r)
		}
		return v
	}
	same := func(got any, want string) {
		t.Helper()
		b, _ := json.Marshal(got)
		if string(b) != want {
			t.Errorf("got %s, want %s", b, want)
		}
	}
	same(js(0, "fleet:pause", "--queue", "mail"), `{"paused":{"queue":"mail"}}`)
	same(js(0, "fleet:pause", "exports"), `{"paused":{"supervisor":"exports"}}`)
	s := js(1, "fleet:status")
	same(s["status"], `"Inactive"`)
	same(s["paused"], `{"all":false,"queues":["mail"],"supervisors":["exports"]}`)
	same(s["masters"], `[]`)
	if r := run(t, dir, env, "fleet:status"); r.code != 1 || !strings.HasPrefix(r.stdout, "Inactive") ||
		!strings.Contains(r.stdout, "paused: supervisors exports; queues mail") {
		t.Errorf("status: %+v", r)
	}
	same(js(0, "fleet:continue", "--queue", "mail"), `{"continued":{"queue":"mail"}}`)
	same(js(0, "fleet:continue"), `{"continued":{"all":true}}`)
	if r := run(t, dir, env, "fleet:status"); !strings.Contains(r.stdout, "paused: nothing") {
		t.Errorf("status after continue: %+v", r)
	}
	same(js(0, "fleet:terminate"), `{"terminate":{"live_masters":0,"requested":true}}`)

	d := js(0, "dispatch", "--name", "demo.noop", "--count", "3", "--queue", "mail")
	same(d["dispatched"].(map[string]any)["count"], `3`)
	same(d["dispatched"].(map[string]any)["queue"], `"mail"`)

	st := js(0, "migrate", "status")
	same(st["sets"], `[{"applied":true,"dirty":false,"latest":10,"set":"queue","version":10},{"applied":true,"dirty":false,"latest":11,"set":"fleet","version":11}]`)
	same(st["history"], `"partitions"`)
	same(js(0, "migrate")["applied"], `0`)
	down := js(0, "migrate", "down", "--set", "fleet", "--steps", "1")
	same(down["rolled_back"], `1`)
	same(down["set"], `"fleet"`)
	same(js(0, "migrate")["applied"], `1`)
}
