package master

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/queue"
)

// After a round that did every due period, a duty's periods are not read
// again until, by the service's clock, one can be due: the metrics a
// minute (and a settle time) later, the upkeep ten minutes later.
func TestDutiesStayQuietUntilAPeriodCanBeDue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	e.exec(t, `UPDATE fleet_state SET updated_at = now() - interval '1 hour' WHERE key = 'tables:created'`)
	clock := newTestClock(time.Now())
	set := e.set
	set.Now = clock.Now
	d := newDuties(e.st, set, e.log, func() string { return "me" }, time.Now, e.budget, func(model.LongWaitDetected) bool { return true })
	d.sig.read.Init()
	ctx := context.Background()
	d.round(ctx)
	if got := []string{d.sig.read.Wait(t), d.sig.read.Wait(t)}; !slices.Equal(got, []string{snapshotDuty, upkeepDuty}) {
		t.Fatalf("first round read %v", got)
	}
	d.round(ctx)
	d.sig.read.None(t, "a round with nothing due read the duties")
	// Just past the instant the next minute's snapshot can be due (by the
	// database's clock: the minute's end and its settle time), the round
	// reads the metrics and not the upkeep, unless that instant is also a
	// ten-minute mark, when both are due.
	wake, upkeepWake := d.quiet[snapshotDuty], d.quiet[upkeepDuty]
	if wake.IsZero() || wake.Sub(clock.Now()) > 65*time.Second {
		t.Fatalf("after the first round the metrics are quiet until %v, %v from now; want within a minute and its settle time", wake, wake.Sub(clock.Now()))
	}
	clock.Advance(wake.Sub(clock.Now()) + time.Millisecond)
	d.round(ctx)
	if got := d.sig.read.Wait(t); got != snapshotDuty {
		t.Fatalf("a minute later the round read %q, want the metrics", got)
	}
	if wake.Before(upkeepWake) {
		d.sig.read.None(t, "the upkeep was read a minute after it was done")
	} else if got := d.sig.read.Wait(t); got != upkeepDuty {
		t.Fatalf("at a ten-minute mark the round read %q after the metrics, want the upkeep", got)
	}
	clock.Advance(10 * time.Minute)
	d.round(ctx)
	if got := []string{d.sig.read.Wait(t), d.sig.read.Wait(t)}; !slices.Equal(got, []string{snapshotDuty, upkeepDuty}) {
		t.Fatalf("ten minutes later the round read %v", got)
	}
}

// A long wait is raised once per cooldown across the masters, whichever
// checks first, and handed to the alerts service; one the alerts service
// refuses is logged as dropped.
func TestDutiesRaiseALongWaitOncePerCooldown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	if _, err := queue.NewClient(e.pool, queue.Defaults{}).Dispatch(context.Background(), queue.NewJob("x", nil)); err != nil {
		t.Fatal(err)
	}
	e.exec(t, `UPDATE queue_jobs SET available_at = now() - interval '5 seconds'`)
	set := e.set
	set.LongWait = map[string]int{"default": 1, "other": 1}
	set.LongWaitCooldown = time.Hour
	set.OnLongWait = func(context.Context, model.LongWaitDetected) {}
	var mu sync.Mutex
	var raised []model.LongWaitDetected
	offer := func(refuse bool) func(model.LongWaitDetected) bool {
		return func(ev model.LongWaitDetected) bool {
			mu.Lock()
			defer mu.Unlock()
			raised = append(raised, ev)
			return !refuse
		}
	}
	a := newDuties(e.st, set, e.log, func() string { return "a" }, time.Now, e.budget, offer(true))
	b := newDuties(e.st, set, e.log, func() string { return "b" }, time.Now, e.budget, offer(false))
	ctx := context.Background()
	for range 3 {
		a.longWaits(ctx)
		b.longWaits(ctx)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(raised) != 1 || raised[0].Queue != "default" || raised[0].ThresholdSecs != 1 || raised[0].WaitSecs < 5 {
		t.Fatalf("raised %+v, want one alert for default", raised)
	}
	if !strings.Contains(e.logs.String(), "long-wait listener is too slow: alert dropped") {
		t.Error("the refused alert was not logged as dropped")
	}
}

// Without a listener the long-wait check reads nothing.
func TestDutiesWithoutListenerCheckNoWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	set := e.set
	set.LongWait = map[string]int{"default": 1}
	d := newDuties(e.st, set, e.log, func() string { return "a" }, time.Now, e.budget, nil)
	if len(d.longWait) != 0 {
		t.Fatal("long waits are checked with no listener")
	}
	d.longWaits(context.Background()) // would call the nil offer
}

// Stopped within a minute, the service writes the minute in progress as
// far as it went, on its last round.
func TestDutiesStopWritesTheMinuteInProgress(t *testing.T) {
	t.Parallel()
	// The last round has the stop budget: one that only catches a hang,
	// so that a busy machine's last round still writes.
	e := newEnv(t, testwait.Hang)
	e.exec(t, `UPDATE fleet_state SET updated_at = now() - interval '1 hour' WHERE key = 'tables:created'`)
	// The store's clock stands 10 s into a minute, in which 7 attempts
	// finished.
	var minute time.Time
	if err := e.pool.QueryRow(context.Background(), `SELECT date_trunc('minute', now())`).Scan(&minute); err != nil {
		t.Fatal(err)
	}
	clock := newTestClock(minute.Add(10 * time.Second))
	e.exec(t, `INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, 'mail', 'send', 1, 'completed', $1, $1, 20 FROM generate_series(1, 7) g`, minute.Add(time.Second))
	set := e.set
	set.Tick = time.Hour // no round: the last one alone
	since := minute.Add(-time.Minute)
	d := newDuties(e.st.WithClock(clock.Now), set, e.log, func() string { return "me" }, func() time.Time { return since }, e.budget, nil)
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.Stop()
	if n := e.count(t, `SELECT count(*) FROM fleet_metrics WHERE taken_at = $1 AND kind = 'queue' AND subject = 'mail'
		AND jobs = 7 AND covered_until = $2`, minute, clock.Now()); n != 1 {
		t.Fatalf("%d partial snapshots of the minute with its 7 attempts, want 1", n)
	}
}
