package cmd_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/pgtest"
)

// TestFleetNamesATransactionThatHoldsBackCleanup: another session of the
// database holds a transaction open (it took a transaction id, and
// selected a secret). With fleet.held_warn_secs = 1 the master's log names
// its pid, application_name and age once it has held for a second (at
// most once a minute), its /metrics shows it by pid, and fleet:status
// prints it; nowhere is the secret shown. Once it ends, the master says
// so.
func TestFleetNamesATransactionThatHoldsBackCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	dir := t.TempDir()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "forgotten console"
	hold, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close(ctx)
	if _, err := hold.Exec(ctx, `BEGIN; SELECT txid_current(), 'hunter2' AS password`, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(int(hold.PgConn().PID()))
	held := time.Now()

	addr := freeAddr(t)
	env := fleetEnv(url, "APP_FLEET__HELD_WARN_SECS=1", "APP_FLEET__HTTP__ADDR="+addr)
	master := startApp(t, dir, env, "fleet")
	eventually(t, testwait.Hang, "the master's warning naming the session", func() bool {
		return strings.Contains(master.Output(), "held back the cleanup of dead rows past")
	})
	var warning string
	for _, line := range strings.Split(master.Output(), "\n") {
		if strings.Contains(line, "held back the cleanup of dead rows past") {
			warning = line
			break
		}
	}
	t.Logf("the master: %s", warning)
	for _, want := range []string{"pid=" + pid, `application_name="forgotten console"`, "age=", `state="idle in transaction"`, "query=\"BEGIN; SELECT txid_current(), '…'"} {
		if !strings.Contains(warning, want) {
			t.Errorf("the warning %q does not say %s", warning, want)
		}
	}

	metric := `fleet_cleanup_holder_seconds{application_name="forgotten console",pid="` + pid + `"}`
	eventually(t, testwait.Hang, "/metrics showing the session", func() bool {
		code, body := httpGet(t, "http://"+addr+"/metrics", "")
		return code == 200 && strings.Contains(body, metric)
	})

	r := run(t, dir, env, "fleet:status")
	t.Logf("fleet:status:\n%s", r.stdout)
	want := "by pid " + pid + ` (application "forgotten console", idle in transaction): BEGIN; SELECT txid_current(), '…'`
	if r.code != 0 || !strings.Contains(r.stdout, "cleanup held back for ") || !strings.Contains(r.stdout, want) {
		t.Errorf("fleet:status: %+v; want a line with %q", r, want)
	}
	if js := run(t, dir, env, "fleet:status", "--json"); !strings.Contains(js.stdout, `"pid": `+pid) {
		t.Errorf("fleet:status --json does not list pid %s:\n%s", pid, js.stdout)
	}

	if _, err := hold.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	eventually(t, testwait.Hang, "the master saying the cleanup is no longer held back", func() bool {
		return strings.Contains(master.Output(), "no transaction holds back the cleanup of dead rows any more")
	})
	if r := run(t, dir, env, "fleet:status"); strings.Contains(r.stdout, "cleanup held back") {
		t.Errorf("fleet:status after the rollback still names a holder:\n%s", r.stdout)
	}
	for _, out := range []string{master.Output(), r.stdout} {
		if strings.Contains(out, "hunter2") {
			t.Errorf("the secret the session selected is shown:\n%s", out)
		}
	}
	// At most one warning a minute.
	if n, most := strings.Count(master.Output(), "held back the cleanup of dead rows past"), 1+int(time.Since(held)/time.Minute); n > most {
		t.Errorf("%d warnings while the session held for %s, want at most %d", n, time.Since(held).Round(time.Second), most)
	}
}
