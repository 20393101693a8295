package master

import (
	"context"
	"testing"
	"time"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/membership"
	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/periodic"
)

// testBudget is the stop budget of the tests below, and stopSlack what a
// Stop may take on top of it. The statements they hang may take 10 s
// each (3 s for the shared state's read): a stop that waited for one
// would fail.
const (
	testBudget = 300 * time.Millisecond
	stopSlack  = 1500 * time.Millisecond
)

// On a database that hangs every statement of a service (its tables
// locked, as when the database is frozen), Stop cancels the statement in
// flight, gives the service's last round what is left of the stop budget,
// and returns: within the budget, not the statements' time limits.
func TestStopCancelsStatementsInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		tables []string
		// start builds and starts the service, and returns it and what
		// its stop may take beyond the budget.
		start func(t *testing.T, e *svcEnv) (service, time.Duration)
	}{
		{"membership", []string{"fleet_masters"}, func(t *testing.T, e *svcEnv) (service, time.Duration) {
			// A beat in flight is waited for (see membership's Stop): it
			// may take (ttl - interval) / 3, 660 ms here. The leave is cut
			// by the budget.
			ms, err := membership.New(e.st, membership.Config{Name: "frozen", TTL: 2 * time.Second, Interval: 20 * time.Millisecond, Logger: e.log,
				LeaveContext: leaveOnBudget(e.budget)})
			if err != nil {
				t.Fatal(err)
			}
			s := ms
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s, ms.BeatTimeout()
		}},
		{"housekeeping", []string{"queue_jobs"}, func(t *testing.T, e *svcEnv) (service, time.Duration) {
			instance := membership.NewInstance()
			e.member(t, instance, time.Minute)
			releases := &fifo[*releaseReq]{}
			h := newHousekeeping(e.st, e.set, e.log, &fakePeers{instance: instance, trusted: true}, e.budget, releases, newLatest[[]string](), newLatest[suspectSnap](), nil)
			if err := h.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Its last round has a release to do, which hangs too.
			releases.push(&releaseReq{worker: "w", tries: 3, reason: "crash"})
			return h, 0
		}},
		{"shared state", []string{"fleet_state"}, func(t *testing.T, e *svcEnv) (service, time.Duration) {
			s := newSharedState(e.st, e.set.Tick, e.log, time.Now, newLatest[stateSnap]())
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s, 0
		}},
		{"workload", []string{"queue_counts", "queue_jobs"}, func(t *testing.T, e *svcEnv) (service, time.Duration) {
			w := newWorkload(e.st, e.set.Tick, e.log, newLatest[map[string]balancer.QueueWorkload]())
			if err := w.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			return w, 0
		}},
		{"duties", []string{"fleet_duties"}, func(t *testing.T, e *svcEnv) (service, time.Duration) {
			d := newDuties(e.st, e.set, e.log, func() string { return "holder" }, time.Now, e.budget, func(model.LongWaitDetected) bool { return true })
			if err := d.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			return d, 0
		}},
		{"periodic", []string{"fleet_periodic"}, func(t *testing.T, e *svcEnv) (service, time.Duration) {
			spec, err := periodic.Parse("@every 1s", time.UTC)
			if err != nil {
				t.Fatal(err)
			}
			set := e.set
			set.Periodic = []periodic.Schedule{{Name: "tick", Spec: spec, Job: "report", Queue: "ticks"}}
			p := newPeriodicSvc(e.st, set, e.log, func() string { return "holder" })
			if err := p.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			return p, 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, testBudget)
			s, extra := tc.start(t, e)
			e.lockTables(t, tc.tables...)
			e.waitBlocked(t)
			stopWithin(t, s, testBudget+extra+stopSlack)
		})
	}
}

// A listener that blocks until its context ends holds the alerts
// service's stop only for the stop budget.
func TestAlertsListenerEndsWithTheStopBudget(t *testing.T) {
	t.Parallel()
	e := &svcEnv{budget: newStopBudget(testBudget)}
	defer e.budget.release()
	entered := make(chan struct{})
	a := newAlerts(func(ctx context.Context, _ model.LongWaitDetected) {
		close(entered)
		<-ctx.Done()
	}, discardLog(), e.budget)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.offer(model.LongWaitDetected{Queue: "q"})
	<-entered
	if took := stopWithin(t, a, testBudget+stopSlack); took < testBudget/2 {
		t.Errorf("Stop took %s: the listener's context ended before the budget", took)
	}
}
