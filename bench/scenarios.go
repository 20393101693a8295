package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
	"github.com/fleet-go/fleet/worker"
)

// Sizes of the in-process fleet the drain, latency and backlog scenarios
// run.
const (
	benchDrainProcesses  = 2
	benchDrainConc       = 64
	benchLatencyConc     = 16
	benchBoundConns      = 4
	benchInsertChunk     = 50000
	benchStallAfter      = 60 * time.Second
	benchLatencyPoll     = time.Millisecond
	benchDispatchWindow  = 5 * time.Second
	benchDispatchLarge   = 50000
	benchDispatchWorkers = 16
)

// insert bulk-inserts n bench jobs on queue in chunks, with progress.
func (b *bench) insert(ctx context.Context, queue string, n int) error {
	var done atomic.Int64
	stop := b.progress(ctx, "inserting into "+queue, int64(n), func(context.Context) (int64, error) { return done.Load(), nil })
	defer stop()
	for done.Load() < int64(n) {
		k := min(benchInsertChunk, n-int(done.Load()))
		if err := b.db.insert(ctx, queue, JobName, k); err != nil {
			return err
		}
		done.Add(int64(k))
	}
	return nil
}

// ---- bound

type boundResult struct {
	Connections int       `json:"connections"`
	Batch100    benchRate `json:"batch_100"`
	Batch1000   benchRate `json:"batch_1000"`
	Insert      benchRate `json:"insert_copy"`
	Reference   float64   `json:"reference_jobs_per_sec"`
	Statement   string    `json:"statement"`
	// Durable is the durable bound (see durableBound); nil when the
	// scenario did not get that far.
	Durable *durableResult `json:"durable,omitempty"`
}

// durableResult is the durable bound: fleet's own claim and finish
// statements in a loop, with no worker around them.
type durableResult struct {
	Connections int       `json:"connections"`
	Batch       int       `json:"batch"`
	Rate        benchRate `json:"rate"`
	Statements  string    `json:"statements"`
}

func (b *bench) bound(ctx context.Context) error {
	res := &boundResult{Connections: benchBoundConns,
		Statement: "BEGIN; SELECT id ... FOR UPDATE SKIP LOCKED LIMIT batch; DELETE ... WHERE id = ANY(ids); COMMIT"}
	for _, batch := range []int{100, 1000} {
		q := fmt.Sprintf("%sbound-%d", Prefix, batch)
		start := time.Now()
		if err := b.insert(ctx, q, b.f.Jobs); err != nil {
			return err
		}
		ins := b.rate(int64(b.f.Jobs), time.Since(start))
		if batch == 1000 {
			res.Insert = ins
		}
		var deleted atomic.Int64
		stop := b.progress(ctx, fmt.Sprintf("bound batch %d", batch), int64(b.f.Jobs),
			func(context.Context) (int64, error) { return deleted.Load(), nil })
		start = time.Now()
		err := runGroup(ctx, benchBoundConns, func(ctx context.Context, _ int) error {
			for {
				n, err := b.db.claimDelete(ctx, q, batch)
				if err != nil {
					return err
				}
				if n == 0 {
					return nil
				}
				deleted.Add(int64(n))
			}
		})
		elapsed := time.Since(start)
		stop()
		if err != nil {
			return err
		}
		if batch == 100 {
			res.Batch100 = b.rate(deleted.Load(), elapsed)
		} else {
			b.ref = float64(deleted.Load()) / elapsed.Seconds()
			res.Batch1000 = b.rate(deleted.Load(), elapsed)
			res.Batch100.VsBound = round(res.Batch100.JobsPerSec/b.ref, 3)
			res.Insert.VsBound = round(res.Insert.JobsPerSec/b.ref, 3)
		}
	}
	res.Reference = round(b.ref, 1)
	b.rep.Bound = res
	note := fmt.Sprintf("%d jobs, %d connections", b.f.Jobs, benchBoundConns)
	b.addRate("bound", "claim+delete, batch 100", res.Batch100, note)
	b.addRate("bound", "claim+delete, batch 1000 (reference)", res.Batch1000, note)
	b.addRate("bound", "COPY insert (1 connection)", res.Insert, "how fast the bench fills queues")
	d, err := b.durableBound(ctx)
	if err != nil {
		return err
	}
	res.Durable = d
	b.addRate("bound", fmt.Sprintf("fleet's claim+finish, batch %d (durable)", d.Batch), d.Rate,
		fmt.Sprintf("%d jobs, %d connections; lease, history, counters", b.f.Jobs, d.Connections))
	return nil
}

// durableBound is the most the drain could reach on this database: each
// of benchDrainProcesses*2 connections (a drain process's claimer and its
// outcome writer) claims a batch with fleet's own claim statement (a
// lease: reserved_by, a token, the attempt counted), then writes the
// batch's outcomes with fleet's own finish statement (the jobs deleted,
// a history row each, the sharded counters bumped), each in its own
// transaction and commit, as a worker does. The batch is what a busy
// drain worker claims at once (its prefetch bound), so the drain's ratio
// to it is the cost of the worker and the master around the same
// statements: scheduling, handlers, the report pipe, beats.
func (b *bench) durableBound(ctx context.Context) (*durableResult, error) {
	res := &durableResult{Connections: 2 * benchDrainProcesses, Batch: worker.DefaultPrefetch,
		Statements: "JobClaim (lease), then JobFinishMany (delete, history row, sharded counter): two commits a batch"}
	q := Prefix + "durable"
	if err := b.insert(ctx, q, b.f.Jobs); err != nil {
		return nil, err
	}
	var done atomic.Int64
	stop := b.progress(ctx, fmt.Sprintf("durable bound batch %d", res.Batch), int64(b.f.Jobs),
		func(context.Context) (int64, error) { return done.Load(), nil })
	start := time.Now()
	err := runGroup(ctx, res.Connections, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("%s:durable-%d", b.runID, i)
		outcomes := make([]store.JobOutcome, 0, res.Batch)
		for {
			jobs, err := b.st.JobClaim(ctx, store.JobClaimParams{Queue: q, Limit: res.Batch, Worker: name})
			if err != nil {
				return err
			}
			if len(jobs) == 0 {
				return nil
			}
			outcomes = outcomes[:0]
			now := time.Now()
			for _, j := range jobs {
				at := now.Add(j.ClockOffset)
				outcomes = append(outcomes, store.JobOutcome{Lease: j.Lease(), Kind: store.OutcomeCompleted, Status: "completed",
					Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, ReservedAt: j.ReservedAt, StartedAt: at, FinishedAt: at})
			}
			r, err := b.st.JobFinishMany(ctx, store.JobFinishParams{Worker: name, Outcomes: outcomes})
			if err != nil {
				return err
			}
			if r.Written != len(outcomes) {
				return fmt.Errorf("durable bound: %d of %d outcomes written", r.Written, len(outcomes))
			}
			done.Add(int64(r.Written))
		}
	})
	elapsed := time.Since(start)
	stop()
	if err != nil {
		return nil, err
	}
	res.Rate = b.rate(done.Load(), elapsed)
	b.durable = res.Rate.JobsPerSec
	return res, nil
}

// runGroup runs n copies of fn and returns the first error; the first
// error cancels the others.
func runGroup(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			if errs[i] = fn(ctx, i); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return errors.Join(errs...)
}

// ---- the in-process fleet

// benchFleet is a real master, built as "app fleet" builds it, running
// fleet:work children of the app's executable on one bench queue.
type benchFleet struct {
	cancel context.CancelFunc
	done   chan struct{}
	sum    master.Summary
	err    error
	once   sync.Once
}

func (b *bench) startFleet(ctx context.Context, queueName string, processes, concurrency int) (*benchFleet, error) {
	sups, err := supervisor.Resolve(supervisor.Options{
		Supervisors: map[string]supervisor.SupervisorOptions{
			"bench": {Queues: []string{queueName}, Balance: string(supervisor.BalanceOff),
				MaxProcesses: &processes, Concurrency: &concurrency},
		},
		DefaultConcurrency: b.cfg.Queue.Workers,
	})
	if err != nil {
		return nil, err
	}
	sp, err := spawner.NewProcessSpawner(spawner.ProcessOptions{Executable: b.exe, Dir: b.opts.Dir, Output: b.stderr, Logger: b.log})
	if err != nil {
		return nil, err
	}
	env, err := b.childEnv()
	if err != nil {
		return nil, err
	}
	for _, kv := range env[len(b.opts.Environ):] {
		k, v, _ := cutEnv(kv)
		sp.Env(k, v)
	}
	m, err := b.opts.NewMaster(b.cfg, sups, b.st, sp)
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(ctx)
	f := &benchFleet{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		f.sum, f.err = m.Run(mctx)
	}()
	return f, nil
}

func cutEnv(kv string) (string, string, bool) {
	for i := range len(kv) {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

// stop stops the master (it stops its children gracefully) and waits for
// it; calling it again returns the same.
func (f *benchFleet) stop() (master.Summary, error) {
	f.once.Do(func() {
		f.cancel()
		<-f.done
		if errors.Is(f.err, context.Canceled) {
			f.err = nil
		}
	})
	return f.sum, f.err
}

// failedIfStopped returns the master's error when it stopped by itself.
func (f *benchFleet) failedIfStopped() error {
	select {
	case <-f.done:
		if f.err != nil {
			return fmt.Errorf("the bench's master stopped: %w", f.err)
		}
		return errors.New("the bench's master stopped")
	default:
		return nil
	}
}

// waitEmpty polls queue every interval until it holds no job, failing when
// nothing moved for benchStallAfter or stopped reports an error. It returns when it
// saw the queue empty.
func (b *bench) waitEmpty(ctx context.Context, stopped func() error, queueName string, interval time.Duration) (time.Time, error) {
	last, lastMove := int64(-1), time.Now()
	for {
		n, err := b.db.queueSize(ctx, queueName)
		if err != nil {
			return time.Time{}, err
		}
		now := time.Now()
		if n == 0 {
			return now, nil
		}
		if n != last {
			last, lastMove = n, now
		} else if now.Sub(lastMove) > benchStallAfter {
			return time.Time{}, fmt.Errorf("%s: %d jobs left and none finished for %s (is %s registered? see the children's logs)",
				queueName, n, benchStallAfter, JobName)
		}
		if err := stopped(); err != nil {
			return time.Time{}, err
		}
		if err := sleepCtx(ctx, interval); err != nil {
			return time.Time{}, err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ---- drain

type drainResult struct {
	Supervisor string    `json:"supervisor"`
	Processes  int       `json:"processes"`
	Conc       int       `json:"concurrency"`
	Rate       benchRate `json:"rate"`
	Failed     int64     `json:"failed"`
	Attempts   int64     `json:"attempts"`
	Started    int       `json:"workers_started"`
	Crashed    int       `json:"workers_crashed"`
	// VsDurable is the drain's rate over the durable bound's (0: the
	// bound did not run).
	VsDurable float64 `json:"vs_durable_bound,omitempty"`
}

func (b *bench) drain(ctx context.Context) error {
	q := Prefix + "drain"
	n := b.f.Jobs
	b.progressf("drain: master with supervisor bench (balance off, %d processes × concurrency %d) on %s", benchDrainProcesses, benchDrainConc, q)
	md, err := b.masterDrain(ctx, q, n, benchDrainProcesses, benchDrainConc)
	if err != nil {
		return err
	}
	res := &drainResult{Supervisor: "bench", Processes: benchDrainProcesses, Conc: benchDrainConc,
		Rate: md.rate, Failed: md.failed, Attempts: md.sum.Jobs, Started: md.sum.Started, Crashed: md.sum.Crashed}
	note := fmt.Sprintf("master + %d fleet:work × concurrency %d, history recorded", benchDrainProcesses, benchDrainConc)
	if b.durable > 0 {
		res.VsDurable = round(res.Rate.JobsPerSec/b.durable, 3)
		note += fmt.Sprintf("; %.3f× the durable bound", res.VsDurable)
	}
	b.rep.Drain = res
	b.addRate("drain", fmt.Sprintf("%d no-op jobs, first claim to queue empty", n), res.Rate, note)
	return drainFailed(md.failed)
}

// masterDrained is one drain through a master.
type masterDrained struct {
	rate benchRate
	// fromStart is the rate from the master's start (just after the
	// insert) to the queue found empty.
	fromStart benchRate
	sum       master.Summary
	failed    int64
}

// drainFailed is the error of a drain in which failed jobs failed.
func drainFailed(failed int64) error {
	if failed > 0 {
		return fmt.Errorf("%d jobs failed during the drain (see queue_failed_jobs)", failed)
	}
	return nil
}

// drained is how a drain of the n jobs of q that began at since and found
// the queue empty at emptyAt went: its rate from the first claim, and how
// many jobs failed.
func (b *bench) drained(ctx context.Context, q string, n int, since, emptyAt time.Time) (benchRate, int64, error) {
	first, ok, err := b.db.firstReserved(ctx, q, since)
	if err != nil {
		return benchRate{}, 0, err
	}
	if !ok {
		return benchRate{}, 0, fmt.Errorf("%s drained but no attempt is in fleet_jobs", q)
	}
	failed, err := b.db.failedCount(ctx, q)
	return b.rate(int64(n), emptyAt.Sub(first)), failed, err
}

// masterDrain inserts n jobs into q and drains them through a master with
// one supervisor of processes fleet:work × concurrency (balance off),
// timed from the first claim to the queue found empty.
func (b *bench) masterDrain(ctx context.Context, q string, n, processes, concurrency int) (masterDrained, error) {
	var md masterDrained
	if err := b.insert(ctx, q, n); err != nil {
		return md, err
	}
	since := time.Now()
	f, err := b.startFleet(ctx, q, processes, concurrency)
	if err != nil {
		return md, err
	}
	defer func() { _, _ = f.stop() }()
	stop := b.progress(ctx, fmt.Sprintf("master %d × %d", processes, concurrency), int64(n), b.doneOf(q, int64(n)))
	emptyAt, err := b.waitEmpty(ctx, f.failedIfStopped, q, 20*time.Millisecond)
	stop()
	if err != nil {
		return md, err
	}
	if md.sum, err = f.stop(); err != nil {
		return md, err
	}
	md.rate, md.failed, err = b.drained(ctx, q, n, since, emptyAt)
	md.fromStart = b.rate(int64(n), emptyAt.Sub(since))
	return md, err
}

// doneOf reads how many of total jobs have left queue.
func (b *bench) doneOf(queueName string, total int64) func(context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		n, err := b.db.queueSize(ctx, queueName)
		return total - n, err
	}
}

// ---- latency

type latencyResult struct {
	Samples     int `json:"samples"`
	Concurrency int `json:"concurrency"`
	// DispatchToStart is from just before Dispatch to the handler's first
	// line, both on this host's clock (see RegisterStamp).
	DispatchToStart latencyStats `json:"dispatch_to_start_ms"`
	// DispatchToStartedAt is to the attempt's started_at in fleet_jobs
	// instead: the worker's clock moved onto the database's by the claim's
	// offset estimate, which is within half the claim's round trip.
	DispatchToStartedAt latencyStats `json:"dispatch_to_started_at_ms"`
	DispatchToOutcom    latencyStats `json:"dispatch_to_outcome_ms"`
	// DurableCommit is the round trip of a small transaction that waits
	// for its WAL flush, timed between the samples: a dispatch waits for
	// one before its notification goes out, and the claim for another
	// before the handler starts.
	DurableCommit latencyStats `json:"durable_commit_ms"`
	PollMs        float64      `json:"outcome_poll_ms"`
}

type latencyStats struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func statsOf(ds []time.Duration) latencyStats {
	if len(ds) == 0 {
		return latencyStats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) float64 {
		i := int(p*float64(len(s))+0.5) - 1
		i = max(0, min(i, len(s)-1))
		return round(float64(s[i].Microseconds())/1000, 2)
	}
	return latencyStats{P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: round(float64(s[len(s)-1].Microseconds())/1000, 2)}
}

func (l latencyStats) String() string {
	return fmt.Sprintf("p50 %.1f  p95 %.1f  p99 %.1f  max %.1f ms", l.P50, l.P95, l.P99, l.Max)
}

func (b *bench) latency(ctx context.Context) error {
	q := Prefix + "latency"
	dir, err := os.MkdirTemp("", "fleet-bench-latency-")
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	defer os.RemoveAll(dir)
	b.stamps = filepath.Join(dir, "stamps")
	defer func() { b.stamps = "" }()
	f, err := b.startFleet(ctx, q, 1, benchLatencyConc)
	if err != nil {
		return err
	}
	defer func() { _, _ = f.stop() }()
	b.progressf("latency: master + 1 fleet:work × concurrency %d on %s, %d samples one at a time", benchLatencyConc, q, b.f.Samples)
	// The first job waits for the child to start; it is no sample.
	if _, err := b.timeOne(ctx, f, q); err != nil {
		return err
	}
	var starts, startedAts, outcomes, commits []time.Duration
	var count atomic.Int64
	stop := b.progress(ctx, "latency", int64(b.f.Samples), func(context.Context) (int64, error) { return count.Load(), nil })
	defer stop()
	for range b.f.Samples {
		// Let the worker go idle (waiting for a notification) first.
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
		t, err := b.timeOne(ctx, f, q)
		if err != nil {
			return err
		}
		starts, startedAts, outcomes = append(starts, t.start), append(startedAts, t.startedAt), append(outcomes, t.outcome)
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return err
		}
		c, err := b.db.durableCommit(ctx)
		if err != nil {
			return err
		}
		commits = append(commits, c)
		count.Add(1)
	}
	stop()
	res := &latencyResult{Samples: len(starts), Concurrency: benchLatencyConc,
		DispatchToStart: statsOf(starts), DispatchToStartedAt: statsOf(startedAts), DispatchToOutcom: statsOf(outcomes),
		DurableCommit: statsOf(commits), PollMs: float64(benchLatencyPoll.Microseconds()) / 1000}
	b.rep.Latency = res
	note := fmt.Sprintf("%d samples, idle fleet (1 × concurrency %d)", res.Samples, benchLatencyConc)
	b.addRow("latency", "dispatch → handler start", res.DispatchToStart.String(), note+"; start on the handler's clock, one host")
	b.addRow("latency", "dispatch → started_at", res.DispatchToStartedAt.String(),
		"fleet_jobs.started_at: on the database's clock, through an offset within half a claim's round trip")
	b.addRow("latency", "dispatch → outcome written", res.DispatchToOutcom.String(), fmt.Sprintf("job gone from queue_jobs, polled every %s", benchLatencyPoll))
	b.addRow("latency", "one durable commit", res.DurableCommit.String(),
		"a commit that waits for its WAL flush, between the samples: a dispatch and a claim wait for one each")
	return nil
}

// timedJob is how one job of the latency scenario went, from just
// before its Dispatch.
type timedJob struct {
	start, startedAt, outcome time.Duration
}

// timeOne dispatches one StampJobName job and waits until it is gone: it
// returns the times from just before Dispatch to the handler's start (as
// the handler noted it in b.stamps, and as fleet_jobs.started_at has it)
// and to the moment the bench saw the job gone from queue_jobs.
func (b *bench) timeOne(ctx context.Context, f *benchFleet, q string) (timedJob, error) {
	t0 := time.Now()
	res, err := b.client.Dispatch(ctx, queue.NewJob(StampJobName, nil).OnQueue(q))
	if err != nil {
		return timedJob{}, err
	}
	id := res.ID
	deadline := t0.Add(benchStallAfter)
	for {
		gone, err := b.db.jobGone(ctx, id)
		if err != nil {
			return timedJob{}, err
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			return timedJob{}, fmt.Errorf("job %d did not finish within %s", id, benchStallAfter)
		}
		if err := f.failedIfStopped(); err != nil {
			return timedJob{}, err
		}
		if err := sleepCtx(ctx, benchLatencyPoll); err != nil {
			return timedJob{}, err
		}
	}
	t := timedJob{outcome: time.Since(t0)}
	a, err := b.db.attemptOf(ctx, id)
	if err != nil {
		return timedJob{}, fmt.Errorf("job %d: %w", id, err)
	}
	t.startedAt = a.StartedAt.Sub(t0.Round(0))
	at, err := stampOf(b.stamps, id)
	if err != nil {
		return timedJob{}, err
	}
	t.start = at.Sub(t0.Round(0))
	return t, nil
}

// stampOf returns when job id's StampJobName handler started, as it noted
// in the file path.
func stampOf(path string, id int64) (time.Time, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the handlers' starts: %w", err)
	}
	want := strconv.FormatInt(id, 10) + " "
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, want); ok {
			ns, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("%s: line %q: %w", path, line, err)
			}
			return time.Unix(0, ns), nil
		}
	}
	return time.Time{}, fmt.Errorf("job %d ran, but its handler noted no start in %s (is %s registered with %s?)", id, path, StampJobName, EnvStamps)
}

// ---- dispatch

type dispatchResult struct {
	Single1   benchRate `json:"dispatch_1_goroutine"`
	Single16  benchRate `json:"dispatch_16_goroutines"`
	Many1000  benchRate `json:"dispatch_many_1000"`
	ManyLarge benchRate `json:"dispatch_many_large"`
	LargeSize int       `json:"large_batch"`
	Copy      benchRate `json:"copy_reference"`
}

func (b *bench) dispatch(ctx context.Context) error {
	q := Prefix + "dispatch"
	res := &dispatchResult{}
	single := func(workers int) (benchRate, error) {
		var n atomic.Int64
		stop := b.progress(ctx, fmt.Sprintf("Dispatch × %d goroutines", workers), 0, func(context.Context) (int64, error) { return n.Load(), nil })
		defer stop()
		start := time.Now()
		deadline := start.Add(benchDispatchWindow)
		err := runGroup(ctx, workers, func(ctx context.Context, _ int) error {
			for time.Now().Before(deadline) && n.Load() < int64(b.f.Jobs) {
				if _, err := b.client.Dispatch(ctx, queue.NewJob(JobName, nil).OnQueue(q)); err != nil {
					return err
				}
				n.Add(1)
			}
			return nil
		})
		return b.rate(n.Load(), time.Since(start)), err
	}
	var err error
	if res.Single1, err = single(1); err != nil {
		return err
	}
	if err := b.cleanup(ctx, "Dispatch × 1"); err != nil {
		return err
	}
	if res.Single16, err = single(benchDispatchWorkers); err != nil {
		return err
	}
	if err := b.cleanup(ctx, "Dispatch × 16"); err != nil {
		return err
	}
	many := func(batch int) (benchRate, error) {
		var n atomic.Int64
		stop := b.progress(ctx, fmt.Sprintf("DispatchMany batches of %d", batch), int64(b.f.Jobs), func(context.Context) (int64, error) { return n.Load(), nil })
		defer stop()
		var total time.Duration
		for n.Load() < int64(b.f.Jobs) {
			k := min(batch, b.f.Jobs-int(n.Load()))
			jobs := make([]*queue.JobSpec, k)
			for i := range jobs {
				jobs[i] = queue.NewJob(JobName, nil).OnQueue(q)
			}
			start := time.Now() // building the jobs is the caller's, not timed
			if _, err := b.client.DispatchMany(ctx, jobs); err != nil {
				return benchRate{}, err
			}
			total += time.Since(start)
			n.Add(int64(k))
		}
		return b.rate(n.Load(), total), nil
	}
	if res.Many1000, err = many(1000); err != nil {
		return err
	}
	if err := b.cleanup(ctx, "DispatchMany 1000"); err != nil {
		return err
	}
	res.LargeSize = min(benchDispatchLarge, b.f.Jobs)
	saved := b.f.Jobs
	b.f.Jobs = res.LargeSize
	res.ManyLarge, err = many(res.LargeSize)
	b.f.Jobs = saved
	if err != nil {
		return err
	}
	if err := b.cleanup(ctx, "DispatchMany large"); err != nil {
		return err
	}
	start := time.Now()
	if err := b.db.insert(ctx, q, JobName, res.LargeSize); err != nil {
		return err
	}
	res.Copy = b.rate(int64(res.LargeSize), time.Since(start))
	b.rep.Dispatch = res
	b.addRate("dispatch", "Dispatch, 1 goroutine", res.Single1, fmt.Sprintf("for %s or %d jobs", benchDispatchWindow, b.f.Jobs))
	b.addRate("dispatch", fmt.Sprintf("Dispatch, %d goroutines", benchDispatchWorkers), res.Single16, fmt.Sprintf("for %s or %d jobs", benchDispatchWindow, b.f.Jobs))
	b.addRate("dispatch", "DispatchMany, batches of 1000", res.Many1000, fmt.Sprintf("%d jobs", b.f.Jobs))
	b.addRate("dispatch", fmt.Sprintf("DispatchMany, one batch of %d", res.LargeSize), res.ManyLarge, "")
	b.addRate("dispatch", fmt.Sprintf("COPY, %d rows (reference, not an API)", res.LargeSize), res.Copy, "")
	return nil
}
