package master

import (
	"context"
	"testing"
	"time"

	"github.com/fleet-go/fleet/periodic"
)

// The first round creates the schedules' rows and asks to be run again
// at once; later rounds wait at most a tick, and dispatch each tick as it
// comes, recorded under the master's instance.
func TestPeriodicCreatesSchedulesThenDispatchesTheirTicks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	spec, err := periodic.Parse("@every 1s", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	set := e.set
	set.Tick = 200 * time.Millisecond
	set.Periodic = []periodic.Schedule{{Name: "tick", Spec: spec, Job: "report", Queue: "ticks"}}
	p := newPeriodicSvc(e.st, set, e.log, func() string { return "me" })
	ctx := context.Background()
	if wait := p.round(ctx); wait != periodicRetry {
		t.Fatalf("the round that created the schedule waits %s, want %s", wait, periodicRetry)
	}
	if n := e.count(t, `SELECT count(*) FROM fleet_periodic WHERE name = 'tick'`); n != 1 {
		t.Fatal("no row for the schedule")
	}
	p.sig.round.Init()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	for e.count(t, `SELECT count(*) FROM fleet_periodic_ticks WHERE name = 'tick'`) < 2 {
		if wait := p.sig.round.Wait(t); wait <= 0 || wait > set.Tick {
			t.Fatalf("a round waits %s, want (0, %s]", wait, set.Tick)
		}
	}
	if n := e.count(t, `SELECT count(*) FROM queue_jobs WHERE queue = 'ticks' AND name = 'report'`); n < 2 {
		t.Fatalf("%d jobs for two ticks", n)
	}
}

// Without schedules the service runs nothing.
func TestPeriodicWithoutSchedulesRunsNothing(t *testing.T) {
	t.Parallel()
	// A budget of an hour: a Stop that waited it out would be a hang.
	e := newEnv(t, time.Hour)
	p := newPeriodicSvc(e.st, e.set, e.log, func() string { return "me" })
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.lc.Ended():
	default:
		t.Fatal("a periodic service without schedules runs")
	}
	stopPromptly(t, p)
	if n := e.count(t, `SELECT count(*) FROM fleet_periodic`); n != 0 {
		t.Fatal("rows written without schedules")
	}
}
