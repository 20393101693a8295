package master_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/spawner/spawnertest"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// A master keeps beating, as draining, for as long as its last child runs,
// however far past its ttl, and leaves only once the children are gone.
func TestMasterBeatsThroughTheDrain(t *testing.T) {
	t.Parallel()
	b := start(t, nil, resolve(t, nil), nil, func(s *master.Settings) { s.TTL = 500 * time.Millisecond; s.StopTimeout = time.Minute })
	wait(t, b.fake.WaitRunning(waitCtx(t), 1))
	b.fake.IgnoreStop(true) // the child is busy with a long job
	b.cancel()
	poll(t, "the draining row", func() bool {
		return b.count(t, `SELECT count(*) FROM fleet_masters WHERE instance = $1 AND state = 'draining'`, b.m.Instance()) == 1
	})
	var drainStart time.Time
	if err := b.pool.QueryRow(context.Background(), `SELECT beat_at FROM fleet_masters WHERE instance = $1`, b.m.Instance()).Scan(&drainStart); err != nil {
		t.Fatal(err)
	}
	// Three ttls into the drain, by the database clock, the row still lives.
	poll(t, "beats three ttls into the drain", func() bool {
		return b.count(t, `SELECT count(*) FROM fleet_masters WHERE instance = $1
			AND beat_at > $2::timestamptz + interval '1500 milliseconds' AND expires_at > now()`, b.m.Instance(), drainStart) == 1
	})
	select {
	case <-b.summary:
		t.Fatal("the master returned while its child still ran")
	default:
	}
	b.fake.Exit(b.fake.Running()[0], "stopped")
	b.stop(t)
	if n := b.count(t, `SELECT count(*) FROM fleet_masters WHERE instance = $1`, b.m.Instance()); n != 0 {
		t.Error("with on_stop = leave the row is still there after the master returned")
	}
}

func TestMasterLingers(t *testing.T) {
	t.Parallel()
	b := start(t, nil, resolve(t, nil), nil, func(s *master.Settings) { s.OnStop = master.OnStopLinger; s.Linger = time.Minute })
	wait(t, b.fake.WaitRunning(waitCtx(t), 1))
	b.stop(t)
	if n := b.count(t, `SELECT count(*) FROM fleet_masters WHERE instance = $1 AND state = 'draining'
		AND expires_at > now() + interval '50 seconds'`, b.m.Instance()); n != 1 {
		t.Error("no lingering draining row that lives about a minute")
	}
}

// After an outage every row expired together: a master that just came back
// releases nothing until its own beats have held for a whole ttl.
func TestMasterTrustsItsViewOnlyAfterATTL(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	if _, err := st.MemberBeat(ctx, store.MemberBeatParams{Instance: "peer", Name: "peer", Host: "h", PID: 1, State: "running", TTL: time.Minute}, false); err != nil {
		t.Fatal(err)
	}
	idRes, err := queue.NewClient(pool, queue.Defaults{}).Dispatch(ctx, queue.NewJob("x", nil))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	if _, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 1, Worker: "peer/w", Master: "peer"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE fleet_masters SET expires_at = now() - interval '1 second' WHERE instance = 'peer'`); err != nil {
		t.Fatal(err)
	}
	const ttl = 1500 * time.Millisecond
	b := start(t, pool, resolve(t, nil), nil, func(s *master.Settings) { s.TTL = ttl })
	poll(t, "the release", func() bool {
		return b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL`, id) == 1
	})
	var gap float64
	if err := pool.QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM h.finished_at - m.started_at)::float8
		FROM fleet_jobs h, fleet_masters m WHERE h.job_id = $1 AND h.status = 'lost' AND m.instance = $2`, id, b.m.Instance()).Scan(&gap); err != nil {
		t.Fatal(err)
	}
	if gap < ttl.Seconds() {
		t.Errorf("released %.2fs after the master's first beat; want at least its ttl (%s)", gap, ttl)
	}
}

// Two instances under one name tell each other apart: each warns once,
// counts one duplicate, and neither releases the other's jobs.
func TestDuplicateMasterNames(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	same := func(s *master.Settings) { s.Name = "web-1"; s.TTL = 600 * time.Millisecond }
	a := start(t, pool, resolve(t, nil), nil, same)
	bb := start(t, pool, resolve(t, nil), nil, same)
	wait(t, a.fake.WaitRunning(waitCtx(t), 1))
	wait(t, bb.fake.WaitRunning(waitCtx(t), 1))
	poll(t, "both to see the duplicate", func() bool {
		return a.m.Membership().Duplicates() == 1 && bb.m.Membership().Duplicates() == 1
	})
	// A job held by a's worker stays held while both run past several ttls.
	ctx := context.Background()
	idRes, err := queue.NewClient(pool, queue.Defaults{}).Dispatch(ctx, queue.NewJob("x", nil))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	worker := a.fake.RunningSpecs()[0].Worker
	if jobs, err := a.st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 1, Worker: worker, Master: a.m.Instance()}); err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	start := a.m.Membership().View().At
	poll(t, "three ttls of beats", func() bool { return a.m.Membership().View().At.Sub(start) > 1800*time.Millisecond })
	if n := a.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by = $2`, id, worker); n != 1 {
		t.Error("the job of one instance was released by the other")
	}
	for _, l := range []string{a.logs.String(), bb.logs.String()} {
		if n := strings.Count(l, "fleet_duplicate_master_name"); n != 1 {
			t.Errorf("%d duplicate-name warnings, want 1", n)
		}
	}
}

// A master whose own clock is ten minutes off sees and is seen like any
// other: liveness is measured on the database clock.
func TestMasterWithSkewedClock(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	a := start(t, pool, resolve(t, nil), nil, func(s *master.Settings) { s.Name = "a" })
	skewed := start(t, pool, resolve(t, nil), nil, func(s *master.Settings) {
		s.Name = "skewed"
		s.Now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	})
	poll(t, "each to see the other online", func() bool {
		return sees(a.m, skewed.m.Instance()) && sees(skewed.m, a.m.Instance())
	})
}

func sees(m *master.Master, instance string) bool {
	v := m.Membership().View()
	o, ok := v.Find(instance)
	return ok && o.Liveness(v.At) == store.LivenessOnline
}

// Three masters under fleet_max_processes = 6 never run more than 6
// processes of the supervisor together while they join, leave and die,
// and get back to 6.
func TestFleetWideBudget(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sups := resolve(t, map[string]supervisor.SupervisorOptions{
		"default": {Queues: []string{"default"}, MinProcesses: intp(1), MaxProcesses: intp(6), FleetMaxProcesses: intp(6), Balance: "simple"},
	})
	var mu sync.Mutex
	var fakes []*spawnertest.FakeSpawner
	sum := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, f := range fakes {
			n += len(f.Running())
		}
		return n
	}
	over := make(chan int, 1)
	done := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if n := sum(); n > 6 {
				select {
				case over <- n:
				default:
				}
			}
		}
	})
	defer func() {
		close(done)
		sampler.Wait()
		select {
		case n := <-over:
			t.Errorf("the supervisor ran %d processes across the masters; the budget is 6", n)
		default:
		}
	}()
	join := func() *bundle {
		b := start(t, pool, sups, nil, func(s *master.Settings) { s.TTL = 600 * time.Millisecond })
		mu.Lock()
		fakes = append(fakes, b.fake)
		mu.Unlock()
		return b
	}
	a := join()
	poll(t, "one master to take the whole budget", func() bool { return sum() == 6 })
	b := join()
	c := join()
	poll(t, "three masters to share the budget", func() bool {
		return sum() == 6 && len(b.fake.Running()) >= 1 && len(c.fake.Running()) >= 1
	})
	b.stop(t) // leaves
	poll(t, "the others to take its share", func() bool { return sum() == 6 && len(b.fake.Running()) == 0 })
	// c dies: its processes die with it, its row expires.
	c.fake.IgnoreStop(true)
	for _, i := range c.fake.Running() {
		_ = c.fake.Process(i).Kill()
	}
	c.cancel()
	poll(t, "the survivor to take the whole budget", func() bool {
		return len(a.fake.Running()) == 6
	})
}

// A worker that exits during a stop with outcomes it could not write (the
// database away) makes the master's Run fail, saying how many.
func TestMasterStopReportsUnwrittenOutcomes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	fake := spawnertest.NewFakeSpawner()
	m, err := master.New(store.New(pool), resolve(t, nil), master.WithSpawner(fake), master.WithSettings(settings(&syncBuffer{})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		sum master.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := m.Run(ctx)
		done <- result{sum, err}
	}()
	wait(t, fake.WaitRunning(waitCtx(t), 1))
	fake.IgnoreStop(true)
	cancel()
	i := fake.Running()[0]
	fake.Report(i, spawner.Report{Type: spawner.ReportExiting, Reason: spawner.ExitStopped, Unsaved: 3})
	fake.Exit(i, spawner.ExitError)
	r := <-done
	if r.sum.Unsaved != 3 || r.err == nil || !strings.Contains(r.err.Error(), "3 finished jobs' outcomes were not written") {
		t.Errorf("Run = %+v, %v; want 3 unsaved and an error saying so", r.sum, r.err)
	}
}

// A worker that hangs before it reports ready is killed after the start
// timeout and replaced, with the crash backoff.
func TestMasterKillsWorkerThatNeverGetsReady(t *testing.T) {
	t.Parallel()
	sups := resolve(t, map[string]supervisor.SupervisorOptions{"solo": {Queues: []string{"q"}, MaxProcesses: intp(1)}})
	fake := spawnertest.NewFakeSpawner()
	fake.SkipReady(true)
	b := start(t, nil, sups, fake, func(s *master.Settings) { s.StartTimeout = 200 * time.Millisecond })
	wait(t, fake.WaitSpawned(waitCtx(t), 1))
	fake.SkipReady(false)
	wait(t, fake.WaitSpawned(waitCtx(t), 2)) // the replacement
	if !fake.Killed(0) {
		t.Error("the worker that never got ready was not killed")
	}
	poll(t, "the log line", func() bool { return strings.Contains(b.logs.String(), "did not get ready within the start timeout") })
	sum := b.stop(t)
	if sum.Crashed < 1 {
		t.Errorf("summary %+v: the kill must count as a crash", sum)
	}
}

// A worker that keeps reporting that it waits (for a free connection,
// say) is not killed by the start timeout; once it stops saying so and
// still is not ready, it is. Time is the master's injected clock, moved
// by the test, and the checks run once the master's view is trusted (the
// start timeout applies only then).
func TestMasterSparesWorkerThatReportsItWaits(t *testing.T) {
	t.Parallel()
	sups := resolve(t, map[string]supervisor.SupervisorOptions{"solo": {Queues: []string{"q"}, MaxProcesses: intp(1)}})
	fake := spawnertest.NewFakeSpawner()
	fake.SkipReady(true)
	const startTimeout = 300 * time.Millisecond
	clock := master.NewTestClock(time.Now())
	b := start(t, nil, sups, fake, func(s *master.Settings) { s.StartTimeout = startTimeout; s.Now = clock.Now })
	wait(t, fake.WaitSpawned(waitCtx(t), 1))
	poll(t, "a trusted view", b.m.Membership().Trusted)
	waiting := spawner.Report{Type: spawner.ReportWaiting, Waiting: "cannot reach database: the server has no connection left (SQLSTATE 53300)"}
	// Four start timeouts of waiting, reported every tenth of one, each
	// followed by a tick's checks at that time.
	for range 40 {
		b.sig.Event.Drain()
		fake.Report(0, waiting)
		b.sig.Event.Wait(t)
		clock.Advance(startTimeout / 10)
		b.sig.Ticked.WaitFresh(t, 2)
	}
	if fake.Killed(0) {
		t.Fatal("a worker reporting that it waits was killed by the start timeout")
	}
	if n := strings.Count(b.logs.String(), "worker waits before it can start"); n != 1 {
		t.Errorf("%d waiting lines for one reason, want 1", n)
	}
	// Silence: now it hangs.
	fake.SkipReady(false)
	clock.Advance(startTimeout)
	poll(t, "the silent worker to be killed", func() bool { return fake.Killed(0) })
	// The restart is planned on the clock once the master has seen the
	// exit: only then is moving past the crash backoff moving past it.
	poll(t, "the restart planned", func() bool { return strings.Contains(b.logs.String(), "restarting after backoff") })
	clock.Advance(10 * time.Second) // past the crash backoff
	wait(t, fake.WaitSpawned(waitCtx(t), 2))
	b.stop(t)
}
