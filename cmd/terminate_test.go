package cmd_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
)

// TestTerminateWait: --wait returns once the master is gone; a master that
// never goes makes it exit 9 at --timeout, naming it.
func TestTerminateWait(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	env := fleetEnv(url)
	if r := run(t, dir, env, "fleet:terminate", "--wait", "--timeout", "0s"); r.code != 2 || !strings.Contains(r.stderr, "--timeout must be positive") {
		t.Fatalf("--timeout 0s: %+v", r)
	}
	// Nothing live: nothing to wait for.
	if r := run(t, dir, env, "fleet:terminate", "--wait"); r.code != 0 || !strings.Contains(r.stdout, "all 0 master(s) stopped") {
		t.Fatalf("terminate --wait without a master: %+v", r)
	}
	master := startApp(t, dir, env, "fleet")
	eventually(t, 10*time.Second, "the master to report Running", func() bool {
		return run(t, dir, env, "fleet:status").code == 0
	})
	r := run(t, dir, env, "fleet:terminate", "--wait", "--timeout", "2m")
	if r.code != 0 || !strings.Contains(r.stdout, "asked 1 running master(s) to terminate; waiting") || !strings.Contains(r.stdout, "all 1 master(s) stopped") {
		t.Fatalf("terminate --wait: %+v", r)
	}
	// Its row is gone: nothing is live any more.
	if r := run(t, dir, env, "fleet:status"); r.code != 1 {
		t.Fatalf("status after terminate --wait: %+v, want no live master", r)
	}
	select {
	case <-master.Done:
	case <-time.After(30 * time.Second):
		t.Fatal("the master did not exit after its row went")
	}

	// A master row that beats far into the future never goes.
	if n := query(t, url, `WITH i AS (INSERT INTO fleet_masters (instance, name, host, pid, state, expires_at)
		VALUES ('stuck-i', 'stuck-1', 'h', 1, 'running', now() + interval '1 hour') RETURNING 1) SELECT count(*) FROM i`); n != 1 {
		t.Fatalf("inserted %d rows", n)
	}
	r = run(t, dir, env, "fleet:terminate", "--wait", "--timeout", "1s", "--json")
	var out struct {
		Terminate struct {
			StillLive []string `json:"still_live"`
		} `json:"terminate"`
	}
	if r.code != 9 || !strings.Contains(r.stderr, "1 master(s) still live after 1s: stuck-1") ||
		json.Unmarshal([]byte(r.stdout), &out) != nil || strings.Join(out.Terminate.StillLive, ",") != "stuck-1" {
		t.Fatalf("terminate --wait with a master that stays: %+v, want exit 9", r)
	}
}
