package master

import (
	"context"
	"errors"
	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/membership"
	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/spawner/spawnertest"
	"github.com/fleet-go/fleet/supervisor"
)

// wantOrder is the documented order of a master's services (package doc,
// docs/internals.md): started in this order, stopped in the reverse.
var wantOrder = []string{"membership", "housekeeping", "shared state", "workload", "alerts", "duties", "periodic", "held transactions", "supervision"}

func serviceNames(services []service) []string {
	names := make([]string, len(services))
	for i, s := range services {
		names[i] = s.Name()
	}
	return names
}

func oneSupervisor(t *testing.T) []supervisor.Supervisor {
	t.Helper()
	sups, err := supervisor.Resolve(supervisor.Options{DefaultConcurrency: 2, DefaultQueue: "default"})
	if err != nil {
		t.Fatal(err)
	}
	return sups
}

func TestMasterServicesAreInTheDocumentedOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	m, err := New(e.st, oneSupervisor(t), WithSpawner(spawnertest.NewFakeSpawner()), WithSettings(e.set))
	if err != nil {
		t.Fatal(err)
	}
	if got := serviceNames(m.services); !slices.Equal(got, wantOrder) {
		t.Fatalf("services %v, want %v", got, wantOrder)
	}
	if m.services[len(m.services)-1] != service(m.supervision) {
		t.Error("supervision, whose end ends Run, is not the last service")
	}
}

// Run starts every service in order, and once supervision has ended
// stops them in the reverse: membership last.
func TestRunStartsInOrderAndStopsInReverse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	m, err := New(e.st, oneSupervisor(t), WithSpawner(spawnertest.NewFakeSpawner()), WithSettings(e.set))
	if err != nil {
		t.Fatal(err)
	}
	m.sig.lifecycle.Init()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Run(ctx)
		done <- err
	}()
	var got []string
	for range wantOrder {
		got = append(got, m.sig.lifecycle.Wait(t))
	}
	cancel()
	for range wantOrder {
		got = append(got, m.sig.lifecycle.Wait(t))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := svclife.Sequence(wantOrder); !slices.Equal(got, want) {
		t.Fatalf("lifecycle\n%v\nwant\n%v", got, want)
	}
	if _, err := m.Run(context.Background()); err == nil {
		t.Error("a second Run did not fail")
	}
}

// The stop budget's context ends its d after the first start, however
// many services start it, and a bounded context ends with it.
func TestStopBudget(t *testing.T) {
	t.Parallel()
	b := newStopBudget(50 * time.Millisecond)
	defer b.release()
	bctx, cancel := b.bound(context.Background(), time.Hour)
	defer cancel()
	if b.context().Err() != nil || bctx.Err() != nil {
		t.Fatal("the budget ran before it started")
	}
	start := time.Now()
	b.start()
	b.start()
	<-bctx.Done()
	<-b.context().Done()
	// Not before the budget; after it, only a hang fails (testwait.Hang).
	took := time.Since(start)
	t.Logf("the budget ended %s after its start", took.Round(time.Millisecond))
	if took < 50*time.Millisecond || took > testwait.Hang {
		t.Errorf("the budget ended %s after its start, want 50 ms", took)
	}
	released := newStopBudget(time.Hour)
	released.start()
	released.release()
	if released.context().Err() == nil {
		t.Error("release did not end the budget")
	}
}

// makers build each service of a master alone, on e, with its own stop
// budget.
func makers(t *testing.T, e *svcEnv) map[string]func(*stopBudget) service {
	instance := membership.NewInstance()
	e.member(t, instance, time.Minute)
	peers := &fakePeers{instance: instance, trusted: true}
	sched := func() periodic.Schedule {
		spec, err := periodic.Parse("@every 1s", time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		return periodic.Schedule{Name: "tick", Spec: spec, Job: "report", Queue: "ticks"}
	}()
	sups := oneSupervisor(t)
	return map[string]func(*stopBudget) service{
		"membership": func(b *stopBudget) service {
			ms, err := membership.New(e.st, membership.Config{Name: "stress", TTL: e.set.TTL, Interval: e.set.Tick, Logger: e.log,
				LeaveContext: leaveOnBudget(b)})
			if err != nil {
				t.Fatal(err)
			}
			return ms
		},
		"housekeeping": func(b *stopBudget) service {
			return newHousekeeping(e.st, e.set, e.log, peers, b, &fifo[*releaseReq]{}, newLatest[[]string](), newLatest[suspectSnap](), nil)
		},
		"shared state": func(*stopBudget) service {
			return newSharedState(e.st, e.set.Tick, e.log, time.Now, newLatest[stateSnap]())
		},
		"workload": func(*stopBudget) service {
			return newWorkload(e.st, e.set.BalanceCooldown, e.log, newLatest[map[string]balancer.QueueWorkload]())
		},
		"alerts": func(b *stopBudget) service {
			a := newAlerts(func(context.Context, model.LongWaitDetected) {}, e.log, b)
			a.offer(model.LongWaitDetected{Queue: "q"})
			return a
		},
		"duties": func(b *stopBudget) service {
			return newDuties(e.st, e.set, e.log, peers.Instance, time.Now, b, func(model.LongWaitDetected) bool { return true })
		},
		"periodic": func(*stopBudget) service {
			set := e.set
			set.Periodic = []periodic.Schedule{sched}
			return newPeriodicSvc(e.st, set, e.log, peers.Instance)
		},
		"held transactions": func(*stopBudget) service {
			return newHeldWatch(e.st, e.set, e.log)
		},
		"supervision": func(*stopBudget) service {
			return newSupervision(spawnertest.NewFakeSpawner(), sups, e.set, e.log, peers, &status{},
				newLatest[stateSnap](), newLatest[map[string]balancer.QueueWorkload](), newLatest[[]string](), &fifo[*releaseReq]{}, newLatest[suspectSnap]())
		},
	}
}

// Each service started and stopped from several goroutines at once, many
// times (run under -race): every call returns, a Start either runs or
// finds the service stopped, and a Stop after all that returns at once.
// The package's TestMain fails the run if any goroutine outlived its
// service.
func TestServicesStartAndStopConcurrently(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	mk := makers(t, e)
	if names := slices.Sorted(maps.Keys(mk)); !slices.Equal(names, slices.Sorted(slices.Values(wantOrder))) {
		t.Fatalf("the stress test covers %v, want every service: %v", names, wantOrder)
	}
	for _, name := range wantOrder {
		t.Run(name, func(t *testing.T) {
			for i := range 20 {
				budget := newStopBudget(time.Second)
				s := mk[name](budget)
				var wg sync.WaitGroup
				var startErr error
				if i%2 == 0 {
					// Start and Stops race.
					wg.Go(func() { startErr = s.Start(context.Background()) })
				} else {
					// Stops race with each other while the service runs.
					if startErr = s.Start(context.Background()); startErr != nil {
						t.Fatalf("Start: %v", startErr)
					}
				}
				for range 3 {
					wg.Go(s.Stop)
				}
				wg.Wait()
				if startErr != nil && !errors.Is(startErr, svclife.ErrStopped) {
					t.Fatalf("Start: %v", startErr)
				}
				stopPromptly(t, s)
				if err := s.Start(context.Background()); err == nil {
					t.Fatal("a Start after Stop succeeded")
				}
				budget.release()
			}
		})
	}
}
