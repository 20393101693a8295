package master

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A session holding a transaction open for longer than HeldWarn is named
// in one warning (pid, application_name, age, state, its statement with
// the literals masked), and in no other until HeldWarnEvery has passed on
// the master's clock, however many looks find it; once it ends, one line
// says so.
func TestHeldWatchNamesTheHolderAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	ctx := context.Background()
	cfg := e.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "report"
	hold, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close(ctx)
	if _, err := hold.Exec(ctx, `BEGIN; SELECT txid_current(), 'tok-123'`, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	pid := int(hold.PgConn().PID())
	clock := newTestClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	set := e.set
	set.Now, set.HeldWarn, set.HeldCheck, set.HeldWarnEvery = clock.Now, 100*time.Millisecond, 20*time.Millisecond, time.Minute
	w := newHeldWatch(e.st, set, e.log)
	w.sig.looked.Init()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	warnings := func() int { return strings.Count(e.logs.String(), "held back the cleanup of dead rows past") }
	for {
		hs := w.sig.looked.Wait(t)
		if len(hs) > 0 {
			if len(hs) != 1 || hs[0].PID != pid || hs[0].Age < 100*time.Millisecond {
				t.Fatalf("found %+v, want the session of pid %d, held for at least 100 ms", hs, pid)
			}
			break
		}
	}
	log := e.logs.String()
	for _, want := range []string{"pid=" + strconv.Itoa(pid), "application_name=report", "age=", `state="idle in transaction"`, `query="BEGIN; SELECT txid_current(), '…'"`, "others=0"} {
		if !strings.Contains(log, want) {
			t.Errorf("the warning does not say %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, "tok-123") {
		t.Errorf("the warning shows the statement's literal:\n%s", log)
	}
	// More looks within the minute find it and say nothing more.
	for range 5 {
		if hs := w.sig.looked.Wait(t); len(hs) != 1 {
			t.Fatalf("a later look found %+v, want the one session", hs)
		}
	}
	if n := warnings(); n != 1 {
		t.Fatalf("%d warnings within a minute, want 1", n)
	}
	clock.Advance(time.Minute)
	w.sig.looked.WaitFresh(t, 2)
	if n := warnings(); n != 2 {
		t.Fatalf("%d warnings a minute later, want 2", n)
	}
	if _, err := hold.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	for {
		if hs := w.sig.looked.Wait(t); len(hs) == 0 {
			break
		}
	}
	w.sig.looked.WaitFresh(t, 2)
	if n := strings.Count(e.logs.String(), "no transaction holds back the cleanup of dead rows any more"); n != 1 || warnings() != 2 {
		t.Fatalf("after the rollback: %d lines saying it ended, %d warnings; want 1 and still 2", n, warnings())
	}
}
