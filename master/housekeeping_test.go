package master

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/membership"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

// claimed dispatches a job to queue q and claims it for worker under
// master, whose member row must be live; it returns the job's id.
func (e *svcEnv) claimed(t *testing.T, q, worker, master string) int64 {
	t.Helper()
	ctx := context.Background()
	idRes, err := queue.NewClient(e.pool, queue.Defaults{Queue: q}).Dispatch(ctx, queue.NewJob("x", nil))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	jobs, err := e.st.JobClaim(ctx, store.JobClaimParams{Queue: q, Limit: 1, Worker: worker, Master: master})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v, %v", jobs, err)
	}
	return id
}

// impatientStore is a store on the test's database whose statements give
// up waiting for a lock after 100 ms.
func (e *svcEnv) impatientStore(t *testing.T) *store.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(e.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "100ms"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return store.New(pool)
}

// An exited worker's jobs are released by the next round, the attempt
// counted. A release that fails (here: its rows locked past the lock
// timeout) is kept and done by a later round.
func TestHousekeepingReleasesWhatAnExitedWorkerHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	instance := membership.NewInstance()
	e.member(t, instance, time.Minute)
	id := e.claimed(t, "q", "m/w-1", instance)
	releases := &fifo[*releaseReq]{}
	h := newHousekeeping(e.impatientStore(t), e.set, e.log, &fakePeers{instance: instance}, e.budget, releases, newLatest[[]string](), newLatest[suspectSnap](), nil)
	h.sig.round.Init()

	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM queue_jobs WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	releases.push(&releaseReq{worker: "m/w-1", tries: 3, reason: "crash"})
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	h.sig.round.WaitFresh(t, 2) // the second began after the release was queued
	if n := e.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by = 'm/w-1'`, id); n != 1 {
		t.Fatal("the job was released through a lock")
	}
	poll(t, "the warning", func() bool {
		return strings.Contains(e.logs.String(), "release the jobs of an exited worker failed; retrying every tick")
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	h.sig.round.WaitFresh(t, 2)
	if n := e.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL AND attempts = 1`, id); n != 1 {
		t.Fatal("the job was not released once its rows were free")
	}
	if !strings.Contains(e.logs.String(), "released the jobs of a lost worker") {
		t.Error("no line for the release")
	}
}

// What an exited worker held is released by the last round of a stopping
// housekeeping, though no tick came.
func TestHousekeepingLastRoundReleases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	instance := membership.NewInstance()
	e.member(t, instance, time.Minute)
	id := e.claimed(t, "q", "m/w-1", instance)
	releases := &fifo[*releaseReq]{}
	set := e.set
	set.Tick = time.Hour
	h := newHousekeeping(e.st, set, e.log, &fakePeers{instance: instance}, e.budget, releases, newLatest[[]string](), newLatest[suspectSnap](), nil)
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	releases.push(&releaseReq{worker: "m/w-1", tries: 3, reason: "stopped"})
	h.Stop()
	if n := e.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL`, id); n != 1 {
		t.Fatal("the last round did not release what the exited worker held")
	}
}

// The jobs of an expired member are released only while this master's
// view is trusted (its beats held for a ttl).
func TestHousekeepingReleasesExpiredMembersOnceTrusted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	e.member(t, "gone", time.Minute)
	id := e.claimed(t, "default", "gone/w", "gone")
	e.exec(t, `UPDATE fleet_masters SET expires_at = now() - interval '1 second' WHERE instance = 'gone'`)
	me := membership.NewInstance()
	view := e.member(t, me, time.Minute)
	peers := &fakePeers{instance: me}
	peers.set(view, false)
	h := newHousekeeping(e.st, e.set, e.log, peers, e.budget, &fifo[*releaseReq]{}, newLatest[[]string](), newLatest[suspectSnap](), nil)
	ctx := context.Background()
	h.round(ctx)
	h.round(ctx)
	if n := e.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by = 'gone/w'`, id); n != 1 {
		t.Fatal("an untrusted view released the jobs of an expired member")
	}
	peers.set(view, true)
	h.round(ctx)
	if n := e.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL`, id); n != 1 {
		t.Fatal("a trusted view did not release the jobs of an expired member")
	}
}

// A worker of this master holding a job far past its timeout is reported
// to supervision, through the kills mailbox.
func TestHousekeepingReportsOverdueWorkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	instance := membership.NewInstance()
	e.member(t, instance, time.Minute)
	e.claimed(t, "q", "m/w-7", instance)
	e.exec(t, `UPDATE queue_jobs SET reserved_at = now() - interval '1 hour'`)
	kills := newLatest[[]string]()
	h := newHousekeeping(e.st, e.set, e.log, &fakePeers{instance: instance}, e.budget, &fifo[*releaseReq]{}, kills, newLatest[suspectSnap](), nil)
	h.round(context.Background())
	got, ok := kills.take()
	if !ok || !slices.Equal(got, []string{"m/w-7"}) {
		t.Fatalf("kills = %v (%v), want the overdue worker", got, ok)
	}
}

// The minute sweep follows the injected clock: once per minute of it.
func TestHousekeepingSweepsOncePerMinuteOfItsClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	clock := newTestClock(time.Now())
	set := e.set
	set.Now = clock.Now
	me := membership.NewInstance()
	peers := &fakePeers{instance: me}
	peers.set(e.member(t, me, time.Minute), true)
	h := newHousekeeping(e.st, set, e.log, peers, e.budget, &fifo[*releaseReq]{}, newLatest[[]string](), newLatest[suspectSnap](), nil)
	ctx := context.Background()
	h.round(ctx)
	first := h.lastSweep
	if !first.Equal(clock.Now()) {
		t.Fatalf("the first round swept at %v, want the clock's %v", first, clock.Now())
	}
	clock.Advance(59 * time.Second)
	h.round(ctx)
	if !h.lastSweep.Equal(first) {
		t.Fatal("swept again within a minute")
	}
	clock.Advance(time.Second)
	h.round(ctx)
	if !h.lastSweep.Equal(clock.Now()) {
		t.Fatal("no sweep a minute after the last")
	}
}
