package master_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/spawner/inprocess"
	"github.com/fleet-go/fleet/spawner/spawnertest"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
	"github.com/fleet-go/fleet/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// syncBuffer is a log or output sink safe for concurrent writes.
type syncBuffer = syncbuf.Buffer

type bundle struct {
	pool    *pgxpool.Pool
	st      *store.Store
	fake    *spawnertest.FakeSpawner
	logs    *syncBuffer
	ctx     context.Context
	cancel  context.CancelFunc
	summary chan master.Summary
	m       *master.Master
	sig     *master.Signals
}

func resolve(t *testing.T, sups map[string]supervisor.SupervisorOptions) []supervisor.Supervisor {
	t.Helper()
	out, err := supervisor.Resolve(supervisor.Options{Supervisors: sups, DefaultConcurrency: 2, DefaultQueue: "default"})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func intp(n int) *int { return &n }

func settings(logs *syncBuffer) master.Settings {
	return master.Settings{
		Tick:            20 * time.Millisecond,
		BalanceCooldown: 60 * time.Millisecond,
		TTL:             2 * time.Second,
		RestartBase:     50 * time.Millisecond,
		RestartMax:      400 * time.Millisecond,
		StopTimeout:     5 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// start runs a master over sups with a FakeSpawner on a fresh database.
func start(t *testing.T, pool *pgxpool.Pool, sups []supervisor.Supervisor, sp spawner.Spawner, tweak ...func(*master.Settings)) *bundle {
	t.Helper()
	if pool == nil {
		pool = pgtest.Pool(t)
	}
	return startOn(t, store.New(pool), sups, sp, tweak...)
}

// startOn is start on st: a store with a clock of the test's, say.
func startOn(t *testing.T, st *store.Store, sups []supervisor.Supervisor, sp spawner.Spawner, tweak ...func(*master.Settings)) *bundle {
	t.Helper()
	b := &bundle{pool: st.Pool(), st: st, logs: &syncBuffer{}, summary: make(chan master.Summary, 1)}
	if sp == nil {
		b.fake = spawnertest.NewFakeSpawner()
		sp = b.fake
	}
	set := settings(b.logs)
	for _, f := range tweak {
		f(&set)
	}
	m, err := master.New(b.st, sups, master.WithSpawner(sp), master.WithSettings(set))
	if err != nil {
		t.Fatal(err)
	}
	b.m = m
	b.sig = master.InitSignals(m)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	go func() {
		sum, err := m.Run(b.ctx)
		if err != nil {
			t.Errorf("master run: %v", err)
		}
		b.summary <- sum
	}()
	t.Cleanup(func() {
		b.cancel()
		select {
		case <-b.summary:
		case <-time.After(20 * time.Second):
			t.Error("master did not stop")
		}
	})
	return b
}

// stop stops the master and returns its summary.
func (b *bundle) stop(t *testing.T) master.Summary {
	t.Helper()
	b.cancel()
	select {
	case s := <-b.summary:
		b.summary <- s // for the cleanup
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("master did not stop")
		return master.Summary{}
	}
}

func wait(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("waiting: %v", err)
	}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// poll is the package's one polling helper.
var poll = master.Poll

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// byGroup counts the fake spawner's running processes by group.
func (b *bundle) byGroup() map[string]int {
	out := map[string]int{}
	for _, s := range b.fake.RunningSpecs() {
		out[s.Group()]++
	}
	return out
}

func twoQueues(t *testing.T) []supervisor.Supervisor {
	return resolve(t, map[string]supervisor.SupervisorOptions{
		"default": {Queues: []string{"default", "mail"}, MaxProcesses: intp(4), Concurrency: intp(4), MaxJobs: 50},
	})
}

func TestMasterStartsAtMinAndStopsGracefully(t *testing.T) {
	t.Parallel()
	b := start(t, nil, twoQueues(t), nil)
	wait(t, b.fake.WaitRunning(waitCtx(t), 2))
	specs := b.fake.RunningSpecs()
	groups := map[string]bool{}
	for _, s := range specs {
		groups[s.Group()] = true
		if s.Supervisor != "default" || s.Master != b.m.Instance() || s.Concurrency != 4 || s.MaxJobs != 50 ||
			!strings.HasPrefix(s.Worker, b.m.Name()+"/default/") {
			t.Errorf("spec = %+v", s)
		}
	}
	if !groups["default"] || !groups["mail"] {
		t.Fatalf("groups = %v, want one process for each queue", groups)
	}
	poll(t, "the master's row", func() bool {
		return b.count(t, `SELECT count(*) FROM fleet_masters WHERE name = $1 AND state = 'running'`, b.m.Name()) == 1
	})
	sum := b.stop(t)
	for i := range 2 {
		cmds := b.fake.Commands(i)
		if len(cmds) == 0 || cmds[len(cmds)-1].Type != spawner.CommandStop {
			t.Errorf("process %d got %v, want a stop", i, cmds)
		}
	}
	if sum.Started != 2 || sum.Crashed != 0 {
		t.Errorf("summary = %+v", sum)
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_masters`); n != 0 {
		t.Error("the master's row outlived it")
	}
}

func TestMasterReplacesRecycledWorkerAtOnce(t *testing.T) {
	t.Parallel()
	b := start(t, nil, twoQueues(t), nil)
	wait(t, b.fake.WaitRunning(waitCtx(t), 2))
	group := b.fake.Specs()[0].Group()
	b.fake.Heartbeat(0, 50, 12)
	b.fake.Exit(0, spawner.ExitMaxJobs)
	wait(t, b.fake.WaitSpawned(waitCtx(t), 3))
	if g := b.fake.Specs()[2].Group(); g != group {
		t.Fatalf("replacement works %q, want %q", g, group)
	}
	sum := b.stop(t)
	if sum.Recycled != 1 || sum.Jobs != 50 || sum.Crashed != 0 {
		t.Fatalf("summary = %+v", sum)
	}
}

func TestMasterBacksOffCrashes(t *testing.T) {
	t.Parallel()
	sups := resolve(t, map[string]supervisor.SupervisorOptions{"solo": {Queues: []string{"q"}, MaxProcesses: intp(1)}})
	b := start(t, nil, sups, nil)
	wait(t, b.fake.WaitSpawned(waitCtx(t), 1))
	// Each crash waits longer before the restart: 50, 100, 200, 400, 400 ms.
	want := []time.Duration{50, 100, 200, 400, 400}
	for i, d := range want {
		crashed := time.Now()
		b.fake.Exit(i, spawner.ExitCrash)
		wait(t, b.fake.WaitSpawned(waitCtx(t), i+2))
		if gap := time.Since(crashed); gap < d*time.Millisecond {
			t.Fatalf("restart %d after %s, want at least %dms", i+1, gap, d)
		}
	}
	poll(t, "the crash-loop error", func() bool {
		return strings.Contains(b.logs.String(), `level=ERROR msg="workers keep failing: five failures within a minute" logger=fleet`)
	})
	// A failed spawn counts as a crash too, and the master keeps going.
	b.fake.FailNext(1)
	b.fake.Exit(len(want), spawner.ExitCrash)
	wait(t, b.fake.WaitSpawned(waitCtx(t), len(want)+2))
	sum := b.stop(t)
	if sum.Crashed != len(want)+2 {
		t.Fatalf("summary = %+v, want %d crashes", sum, len(want)+2)
	}
}

// A worker that reported a recycle (or any reason of a worker that stops
// by itself) and then exited with a failing status crashed: the master
// backs off and logs the crash loop, as for a crash, never counting a
// recycle; the log says what the worker had reported. An exit that agrees
// with the report is still a recycle.
func TestMasterCountsADisagreeingExitAsACrash(t *testing.T) {
	t.Parallel()
	sups := resolve(t, map[string]supervisor.SupervisorOptions{"solo": {Queues: []string{"q"}, MaxProcesses: intp(1)}})
	b := start(t, nil, sups, nil)
	wait(t, b.fake.WaitSpawned(waitCtx(t), 1))
	reasons := []spawner.ExitReason{spawner.ExitMaxJobs, spawner.ExitMaxMemory, spawner.ExitStopped, spawner.ExitEmpty, spawner.ExitFenced}
	for i, r := range reasons {
		crashed := time.Now()
		b.fake.Report(i, spawner.Report{Type: spawner.ReportExiting, Reason: r})
		b.fake.ExitCode(i, 3)
		wait(t, b.fake.WaitSpawned(waitCtx(t), i+2))
		if want := time.Duration(50<<i) * time.Millisecond; time.Since(crashed) < min(want, 400*time.Millisecond) {
			t.Fatalf("restart %d after %s, want the backoff of %s", i+1, time.Since(crashed), want)
		}
	}
	poll(t, "the crash-loop error", func() bool {
		return strings.Contains(b.logs.String(), `msg="workers keep failing: five failures within a minute"`)
	})
	if !strings.Contains(b.logs.String(), `msg="worker exited with status 3 after reporting max_jobs; restarting after backoff"`) {
		t.Errorf("no warning naming what the worker reported:\n%s", b.logs)
	}
	b.fake.Report(len(reasons), spawner.Report{Type: spawner.ReportExiting, Reason: spawner.ExitMaxJobs})
	b.fake.ExitCode(len(reasons), 0)
	wait(t, b.fake.WaitSpawned(waitCtx(t), len(reasons)+2))
	sum := b.stop(t)
	if sum.Crashed != len(reasons) || sum.Recycled != 1 {
		t.Fatalf("summary = %+v, want %d crashes and one recycle", sum, len(reasons))
	}
}

func TestMasterAppliesPause(t *testing.T) {
	t.Parallel()
	b := start(t, nil, twoQueues(t), nil)
	wait(t, b.fake.WaitRunning(waitCtx(t), 2))
	ctx := context.Background()
	if err := b.st.StateSet(ctx, store.StatePauseSupervisorPrefix+"default"); err != nil {
		t.Fatal(err)
	}
	lastIs := func(i int, ct spawner.CommandType) bool {
		c := b.fake.Commands(i)
		return len(c) > 0 && c[len(c)-1].Type == ct
	}
	poll(t, "pause commands", func() bool { return lastIs(0, spawner.CommandPause) && lastIs(1, spawner.CommandPause) })
	// A replacement starts paused.
	b.fake.Exit(0, spawner.ExitMaxTime)
	wait(t, b.fake.WaitSpawned(waitCtx(t), 3))
	if !b.fake.Specs()[2].Paused {
		t.Fatal("a worker started while paused must start paused")
	}
	poll(t, "paused state in the row", func() bool {
		return b.count(t, `SELECT count(*) FROM fleet_masters WHERE state = 'paused'`) == 1
	})
	if _, err := b.st.StateDelete(ctx, store.StatePauseSupervisorPrefix+"default"); err != nil {
		t.Fatal(err)
	}
	poll(t, "continue commands", func() bool { return lastIs(1, spawner.CommandContinue) && lastIs(2, spawner.CommandContinue) })
}

func TestMasterTerminate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	first := start(t, pool, twoQueues(t), nil)
	wait(t, first.fake.WaitRunning(waitCtx(t), 2))
	if err := first.st.StateSet(context.Background(), store.StateTerminate); err != nil {
		t.Fatal(err)
	}
	select {
	case sum := <-first.summary:
		first.summary <- sum
	case <-time.After(10 * time.Second):
		t.Fatal("the master did not terminate")
	}
	// A master started after the request keeps running.
	second := start(t, pool, twoQueues(t), nil)
	wait(t, second.fake.WaitRunning(waitCtx(t), 2))
	// Ten pause states read after the old request and applied: none
	// ended it.
	second.sig.StateApplied.WaitFresh(t, 10)
	select {
	case <-second.summary:
		t.Fatal("a master started after fleet:terminate stopped")
	default:
	}
}

// A job whose workers die under it: the first two deaths charge it
// nothing (released at once, one more try each); then it is a suspect, an
// isolation process is started for it, and each death of that process is
// its own, until its tries are spent and it fails with how the process
// ended. The supervisor's ordinary process is replaced throughout.
func TestMasterIsolatesAJobThatKeepsKillingItsWorkers(t *testing.T) {
	t.Parallel()
	sups := resolve(t, map[string]supervisor.SupervisorOptions{"solo": {Queues: []string{"q"}, MaxProcesses: intp(1), Tries: intp(2)}})
	b := start(t, nil, sups, nil)
	wait(t, b.fake.WaitSpawned(waitCtx(t), 1))
	ctx := context.Background()
	client := queue.NewClient(b.pool, queue.Defaults{Queue: "q"})
	idRes, err := client.Dispatch(ctx, queue.NewJob("x", nil))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	// The fake process "holds" the job as a real worker would, and dies.
	hold := func(i int, suspects bool) {
		t.Helper()
		spec := b.fake.Specs()[i]
		if spec.Isolate != suspects || (suspects && spec.Concurrency != 1) {
			t.Fatalf("process %d: %+v, want isolation %v", i, spec, suspects)
		}
		jobs, err := b.st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 1, Worker: spec.Worker, Master: spec.Master, Suspects: suspects})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim of process %d: %v %v", i, jobs, err)
		}
		_ = b.fake.Process(i).Kill()
	}
	hold(0, false)
	poll(t, "the dead worker's job released, no try spent", func() bool {
		return b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL AND attempts = 1 AND max_tries = 3
			AND crashes = 1 AND last_error LIKE 'lost: its process exited with status -1 while running it and no other job;%'`, id) == 1
	})
	wait(t, b.fake.WaitSpawned(waitCtx(t), 2))
	hold(1, false)
	// A suspect now: an isolation process runs it (3 the replacement of 1,
	// 4 the isolation process, in either order).
	wait(t, b.fake.WaitSpawned(waitCtx(t), 4))
	iso := 2
	if !b.fake.Specs()[iso].Isolate {
		iso = 3
	}
	if b.fake.Specs()[5-iso].Isolate {
		t.Fatalf("specs %+v: want one ordinary process and one isolation process", b.fake.Specs())
	}
	hold(iso, true) // attempt 3 of 4 tries: charged, retried
	wait(t, b.fake.WaitSpawned(waitCtx(t), 5))
	hold(4, true) // attempt 4 of 4: failed
	poll(t, "a job that killed its isolation process at its last try to end in failed jobs", func() bool {
		return b.count(t, `SELECT count(*) FROM queue_failed_jobs WHERE job_id = $1 AND attempts = 4 AND error LIKE
			'crashed its process: the process exited with status -1 while running this job alone, in an isolation process (attempt 4 of 4 tries)%'`, id) == 1
	})
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'lost'`, id); n != 2 {
		t.Errorf("%d lost attempts, want the 2 beside-crash ones", n)
	}
	if n := len(b.fake.Running()); n != 1 {
		t.Errorf("%d processes running, want the ordinary one and no isolation process once no suspect is left", n)
	}
}

func TestMasterReleasesJobsOfExpiredMaster(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	// A master that claimed a job and then stopped beating.
	if _, err := st.MemberBeat(ctx, store.MemberBeatParams{Instance: "gone-instance", Name: "gone", Host: "h", PID: 1, State: "running", TTL: time.Minute}, false); err != nil {
		t.Fatal(err)
	}
	client := queue.NewClient(pool, queue.Defaults{})
	idRes, err := client.Dispatch(ctx, queue.NewJob("x", nil))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	if jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 1, Worker: "gone/default/1", Master: "gone-instance"}); err != nil || len(jobs) != 1 {
		t.Fatalf("claim under a live row: %d jobs, %v", len(jobs), err)
	}
	if _, err := pool.Exec(ctx, `UPDATE fleet_masters SET expires_at = now() - interval '1 second' WHERE instance = 'gone-instance'`); err != nil {
		t.Fatal(err)
	}
	// Fenced: nothing more can be claimed under the expired row.
	if _, err := client.Dispatch(ctx, queue.NewJob("y", nil)); err != nil {
		t.Fatal(err)
	}
	if jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 5, Worker: "gone/default/1", Master: "gone-instance"}); err != nil || len(jobs) != 0 {
		t.Fatalf("claim under an expired row: %d jobs, %v; want none", len(jobs), err)
	}
	b := start(t, pool, resolve(t, nil), nil)
	poll(t, "the release", func() bool {
		return b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL`, id) == 1
	})
	// Released only once the new master's own beats held for a ttl.
	if n := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE job_id = $1 AND status = 'lost'`, id); n != 1 {
		t.Fatalf("lost attempts = %d, want 1", n)
	}
	if !strings.Contains(b.logs.String(), "released the jobs of members that stopped beating") {
		t.Error("no log line for the release")
	}
}

func TestMasterBalancesTowardsBacklog(t *testing.T) {
	t.Parallel()
	b := start(t, nil, twoQueues(t), nil)
	wait(t, b.fake.WaitRunning(waitCtx(t), 2))
	ctx := context.Background()
	client := queue.NewClient(b.pool, queue.Defaults{})
	jobs := make([]*queue.JobSpec, 300)
	for i := range jobs {
		jobs[i] = queue.NewJob("x", nil).OnQueue("mail")
	}
	if _, err := client.DispatchMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	poll(t, "mail to get three processes", func() bool { g := b.byGroup(); return g["mail"] == 3 && g["default"] == 1 })
	// The backlog drains: back to one each, then it stays put.
	if _, err := b.pool.Exec(ctx, `DELETE FROM queue_jobs`); err != nil {
		t.Fatal(err)
	}
	poll(t, "mail to shrink back", func() bool { g := b.byGroup(); return g["mail"] == 1 && g["default"] == 1 })
	spawned := len(b.fake.Specs())
	b.sig.Rebalanced.WaitFresh(t, 5) // five cooldowns
	if g := b.byGroup(); g["mail"] != 1 || g["default"] != 1 || len(b.fake.Specs()) != spawned {
		t.Fatalf("idle allocation moved: %v, %d spawned (was %d)", g, len(b.fake.Specs()), spawned)
	}
}

// The balancer weighs backlogs by the mean runtimes of the minute
// snapshots (not the job history, which is empty here): with the same
// backlog on both queues, the slow one gets the spare processes.
func TestMasterBalancesByRecentRuntime(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	// Minutes M-2 and M-1 lie in the window whichever minute the master
	// reads in next.
	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_metrics (taken_at, kind, subject, jobs, jobs_per_minute, runtime_mean_ms)
		SELECT date_trunc('minute', now()) - ago * interval '1 minute', 'queue', q, 10, 10, ms
		FROM (VALUES ('mail', 10000.0), ('default', 10)) v (q, ms), generate_series(1, 2) ago`); err != nil {
		t.Fatal(err)
	}
	client := queue.NewClient(pool, queue.Defaults{})
	var jobs []*queue.JobSpec
	for range 20 {
		jobs = append(jobs, queue.NewJob("x", nil).OnQueue("mail"), queue.NewJob("x", nil))
	}
	if _, err := client.DispatchMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	b := start(t, pool, twoQueues(t), nil)
	// 20 × 10 s against 20 × 10 ms: three of the four processes for mail.
	poll(t, "mail to get three processes", func() bool { g := b.byGroup(); return g["mail"] == 3 && g["default"] == 1 })
}

func TestMasterWithInProcessWorkers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	jobs := queue.NewRegistry()
	jobs.Handle("noop", func(context.Context, *queue.Job) error { return nil })
	sp := inprocess.New(st, jobs, worker.Config{PollInterval: 50 * time.Millisecond})
	client := queue.NewClient(pool, queue.Defaults{})
	var batch []*queue.JobSpec
	for i := range 200 {
		q := "default"
		if i%2 == 0 {
			q = "mail"
		}
		batch = append(batch, queue.NewJob("noop", nil).OnQueue(q))
	}
	if _, err := client.DispatchMany(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	b := start(t, pool, twoQueues(t), sp)
	poll(t, "the jobs to run", func() bool { return b.count(t, `SELECT count(*) FROM queue_jobs`) == 0 })
	sum := b.stop(t)
	sp.Wait()
	// max_jobs = 50 with 200 jobs: workers were recycled along the way.
	if sum.Recycled < 2 || sum.Jobs != 200 {
		t.Fatalf("summary = %+v, want 200 jobs and some recycling", sum)
	}
}

func TestMasterReleasesJobsOfStandaloneWorkerLongPastTimeout(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	client := queue.NewClient(pool, queue.Defaults{})
	idsRes, err := client.DispatchMany(ctx, []*queue.JobSpec{queue.NewJob("old", nil).Timeout(time.Second), queue.NewJob("fresh", nil)})
	if err != nil {
		t.Fatal(err)
	}
	ids := queue.IDs(idsRes)
	// A worker started by hand (no master) claimed both and died.
	if _, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "default", Limit: 2, Worker: "by-hand"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE queue_jobs SET reserved_at = now() - interval '2 minutes' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	b := start(t, pool, resolve(t, nil), nil)
	poll(t, "the old job's release", func() bool {
		return b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NULL`, ids[0]) == 1
	})
	// The other is within its timeout: still held.
	if n := b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by = 'by-hand'`, ids[1]); n != 1 {
		t.Fatal("a job within its timeout was released")
	}
}

func TestLongWaitAlertOncePerCooldownAcrossMasters(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	st := store.New(pool)
	// The supervisor is paused, so the job waits.
	if err := st.StateSet(ctx, store.StatePauseAll); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.NewClient(pool, queue.Defaults{}).Dispatch(ctx, queue.NewJob("x", nil)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var alerts []model.LongWaitDetected
	listen := func(s *master.Settings) {
		s.LongWait = map[string]int{"default": 1, "other": 1}
		s.LongWaitCooldown = time.Hour
		s.OnLongWait = func(_ context.Context, e model.LongWaitDetected) {
			mu.Lock()
			alerts = append(alerts, e)
			mu.Unlock()
		}
	}
	one := start(t, pool, resolve(t, nil), nil, listen)
	two := start(t, pool, resolve(t, nil), nil, listen)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(alerts) }
	poll(t, "the alert", func() bool { return count() >= 1 })
	// 25 duty rounds of each master: no second alert within the cooldown.
	one.sig.DutiesRound.WaitFresh(t, 25)
	two.sig.DutiesRound.WaitFresh(t, 25)
	mu.Lock()
	defer mu.Unlock()
	if len(alerts) != 1 || alerts[0].Queue != "default" || alerts[0].ThresholdSecs != 1 || alerts[0].WaitSecs < 1 {
		t.Fatalf("alerts = %+v, want exactly one for default", alerts)
	}
}

func TestMasterPausesQueues(t *testing.T) {
	t.Parallel()
	b := start(t, nil, twoQueues(t), nil)
	wait(t, b.fake.WaitRunning(waitCtx(t), 2))
	if err := b.st.StateSet(context.Background(), store.StatePauseQueuePrefix+"mail"); err != nil {
		t.Fatal(err)
	}
	mailProc := 0
	if b.fake.Specs()[1].Group() == "mail" {
		mailProc = 1
	}
	poll(t, "a pause_queues command to the mail worker", func() bool {
		for _, c := range b.fake.Commands(mailProc) {
			if c.Type == spawner.CommandPauseQueues && len(c.Queues) == 1 && c.Queues[0] == "mail" {
				return true
			}
		}
		return false
	})
	for _, c := range b.fake.Commands(1 - mailProc) {
		if c.Type == spawner.CommandPauseQueues && len(c.Queues) > 0 {
			t.Fatalf("the default worker was told to pause %v", c.Queues)
		}
	}
}

func TestMasterWritesMetricsSnapshot(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	tablesCreated(t, pool, time.Now().Add(-time.Hour))
	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, 'mail', 'send', 1, 'completed', ts, ts, 20
		FROM generate_series(1, 30) g,
		     LATERAL (SELECT date_trunc('minute', now()) - interval '1 minute' + g * interval '1 second' AS ts) x`); err != nil {
		t.Fatal(err)
	}
	b := start(t, pool, resolve(t, nil), nil)
	start(t, pool, resolve(t, nil), nil) // a second master competes for the duty
	poll(t, "the snapshot", func() bool {
		return b.count(t, `SELECT count(*) FROM fleet_metrics WHERE kind = 'queue' AND subject = 'mail' AND jobs = 30`) == 1
	})
	if n := b.count(t, `SELECT count(*) FROM fleet_duties WHERE duty = 'metrics' AND done_at IS NOT NULL
		AND period = (SELECT date_trunc('minute', min(finished_at)) FROM fleet_jobs)`); n != 1 {
		t.Fatal("the snapshot of that minute was not recorded as done in fleet_duties")
	}
}

func TestMasterKillsWorkerHoldingJobPastTimeout(t *testing.T) {
	t.Parallel()
	sups := resolve(t, map[string]supervisor.SupervisorOptions{"solo": {Queues: []string{"q"}, MaxProcesses: intp(1)}})
	b := start(t, nil, sups, nil, func(s *master.Settings) { s.TimeoutGrace = time.Second })
	wait(t, b.fake.WaitSpawned(waitCtx(t), 1))
	ctx := context.Background()
	if _, err := queue.NewClient(b.pool, queue.Defaults{Queue: "q"}).Dispatch(ctx, queue.NewJob("x", nil).Timeout(time.Second)); err != nil {
		t.Fatal(err)
	}
	spec := b.fake.Specs()[0]
	if _, err := b.st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: 1, Worker: spec.Worker, Master: spec.Master}); err != nil {
		t.Fatal(err)
	}
	// Reserved for a minute with a 1 s timeout: far past timeout plus grace.
	if _, err := b.pool.Exec(ctx, `UPDATE queue_jobs SET reserved_at = now() - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	poll(t, "the stuck worker to be killed", func() bool { return b.fake.Killed(0) })
	wait(t, b.fake.WaitSpawned(waitCtx(t), 2))
	poll(t, "its job to be released", func() bool {
		return b.count(t, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NULL AND attempts = 1`) == 1
	})
}

// A paused queue counts as idle for balancing, whatever its backlog: it
// keeps min_processes, and the spare processes go to the queue that can
// work. Continued, it gets its share back.
func TestMasterGivesNoSpareProcessesToAPausedQueue(t *testing.T) {
	t.Parallel()
	b := start(t, nil, twoQueues(t), nil)
	wait(t, b.fake.WaitRunning(waitCtx(t), 2))
	ctx := context.Background()
	if err := b.st.StateSet(ctx, store.StatePauseQueuePrefix+"mail"); err != nil {
		t.Fatal(err)
	}
	client := queue.NewClient(b.pool, queue.Defaults{})
	var jobs []*queue.JobSpec
	for i := range 340 {
		q := "mail"
		if i >= 200 {
			q = "default"
		}
		jobs = append(jobs, queue.NewJob("x", nil).OnQueue(q))
	}
	if _, err := client.DispatchMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	poll(t, "default to get the spare processes", func() bool { g := b.byGroup(); return g["default"] == 3 && g["mail"] == 1 })
	if _, err := b.st.StateDelete(ctx, store.StatePauseQueuePrefix+"mail"); err != nil {
		t.Fatal(err)
	}
	poll(t, "mail to get its share back", func() bool { g := b.byGroup(); return g["mail"] == 2 && g["default"] == 2 })
}

// A master's first children start with what its first reads found: the
// fleet's pause state, set before the master started, and the workload,
// which weighs the first allocation (a backlog on one queue takes it a
// process above its minimum at once; a paused queue gets no spare
// process).
func TestMasterStartsItsFirstWorkersWithTheStateAndWorkloadItRead(t *testing.T) {
	t.Parallel()
	sups := resolve(t, map[string]supervisor.SupervisorOptions{
		"default": {Queues: []string{"a", "b"}, MinProcesses: intp(1), MaxProcesses: intp(4), Concurrency: intp(2)},
	})
	for _, all := range []bool{false, true} {
		pool := pgtest.Pool(t)
		ctx := context.Background()
		st := store.New(pool)
		keys := []string{store.StatePauseQueuePrefix + "b"}
		if all {
			keys = append(keys, store.StatePauseAll)
		}
		for _, key := range keys {
			if err := st.StateSet(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name) SELECT q, 'x' FROM unnest('{a,b}'::text[]) q, generate_series(1, 100)`); err != nil {
			t.Fatal(err)
		}
		b := start(t, pool, sups, nil)
		// Paused, the supervisor keeps its minimum: one process a queue.
		want := map[string]int{"a": 2, "b": 1}
		if all {
			want = map[string]int{"a": 1, "b": 1}
		}
		n := want["a"] + want["b"]
		if err := b.fake.WaitSpawned(waitCtx(t), n); err != nil {
			t.Fatalf("paused all %v: %v; log:\n%s", all, err, b.logs.String())
		}
		logs := b.logs.String()
		line, _, _ := strings.Cut(logs[strings.Index(logs, "msg=allocation"):], "\n")
		if w := fmt.Sprintf(`processes="map[a:%d b:%d]"`, want["a"], want["b"]); !strings.Contains(line, w) {
			t.Errorf("paused all %v: first allocation: %s, want %s", all, line, w)
		}
		groups := map[string]int{}
		for _, s := range b.fake.Specs()[:n] {
			groups[s.Group()]++
			if s.Paused != all {
				t.Errorf("paused all %v: worker %s started with paused %v", all, s.Worker, s.Paused)
			}
			if w := map[string]string{"a": "", "b": "b"}[s.Group()]; strings.Join(s.PausedQueues, ",") != w {
				t.Errorf("paused all %v: worker of %s started with paused queues %q, want %q", all, s.Group(), s.PausedQueues, w)
			}
		}
		if groups["a"] != want["a"] || groups["b"] != want["b"] {
			t.Errorf("paused all %v: first workers per queue: %v, want %v", all, groups, want)
		}
		b.stop(t)
	}
}
