package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/metrics"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

// Sizes of the idle, backlog and scale scenarios.
const (
	benchIdleSupervisors = 10
	benchIdleQueues      = 5
	benchProbeSamples    = 20
	benchMaxRateWindow   = 15 * time.Second
	benchSustainShare    = 0.8
	benchTopUpEvery      = 50 * time.Millisecond
)

// ---- idle

type idleResult struct {
	Supervisors     int     `json:"supervisors"`
	QueuesEach      int     `json:"queues_each"`
	Processes       int     `json:"worker_processes"`
	Concurrency     int     `json:"concurrency"`
	Secs            float64 `json:"secs"`
	MasterCPUPct    float64 `json:"master_cpu_pct_of_one_core"`
	WorkersCPUPct   float64 `json:"workers_cpu_pct_of_one_core"`
	TotalCPUPct     float64 `json:"total_cpu_pct_of_one_core"`
	MachineCPUPct   float64 `json:"total_cpu_pct_of_machine"`
	MasterPeakRSSMB float64 `json:"master_peak_rss_mb"`
	WorkerPeakRSSMB float64 `json:"worker_peak_rss_mb"`
	XactPerSec      float64 `json:"transactions_per_sec"`
	Restarted       bool    `json:"workers_restarted"`
}

func (b *bench) idle(ctx context.Context) error {
	var only []string
	extra := []string{"APP_FLEET__HTTP__ADDR="}
	for s := range benchIdleSupervisors {
		name := fmt.Sprintf("bench_idle_%d", s)
		only = append(only, name)
		var queues []string
		for q := range benchIdleQueues {
			queues = append(queues, fmt.Sprintf("%sidle-%d-%d", Prefix, s, q))
		}
		key := "APP_FLEET__SUPERVISORS__" + strings.ToUpper(name) + "__"
		extra = append(extra, key+"QUEUES="+strings.Join(queues, ","), key+"BALANCE=off", key+"MAX_PROCESSES=1")
	}
	extra = append(extra, "APP_FLEET__ONLY="+strings.Join(only, ","))
	env, err := b.childEnv(extra...)
	if err != nil {
		return err
	}
	b.progressf("idle: starting a master process (app fleet) with %d supervisors × %d queues, balance off, 1 process each, concurrency %d",
		benchIdleSupervisors, benchIdleQueues, b.cfg.Queue.Workers)
	p, err := b.startProc([]string{"fleet"}, env)
	if err != nil {
		return err
	}
	defer func() { _ = p.stop() }()
	pid := p.cmd.Process.Pid
	deadline := time.Now().Add(30 * time.Second)
	for len(procChildren(pid)) < benchIdleSupervisors {
		if time.Now().After(deadline) {
			return fmt.Errorf("the idle master runs %d of %d workers after 30 s", len(procChildren(pid)), benchIdleSupervisors)
		}
		select {
		case <-p.done:
			return fmt.Errorf("the idle master exited: %v", p.err)
		default:
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	// Let the workers connect and settle into waiting.
	if err := sleepCtx(ctx, 3*time.Second); err != nil {
		return err
	}
	kids := procChildren(pid)
	cpu0, err := cpuOf(append([]int{pid}, kids...))
	if err != nil {
		return err
	}
	x0, err := b.db.xactCommits(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	total := int64(b.f.IdleSecs)
	stop := b.progress(ctx, "idle", total, func(context.Context) (int64, error) { return int64(time.Since(t0).Seconds()), nil })
	err = sleepCtx(ctx, time.Duration(b.f.IdleSecs)*time.Second)
	stop()
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	x1, err := b.db.xactCommits(ctx)
	if err != nil {
		return err
	}
	cpu1, err := cpuOf(append([]int{pid}, kids...))
	if err != nil {
		return fmt.Errorf("a process of the idle fleet is gone: %w", err)
	}
	res := &idleResult{Supervisors: benchIdleSupervisors, QueuesEach: benchIdleQueues, Processes: len(kids),
		Concurrency: b.cfg.Queue.Workers, Secs: round(secs, 1)}
	pct := func(d time.Duration) float64 { return round(100*d.Seconds()/secs, 2) }
	res.MasterCPUPct = pct(cpu1[0] - cpu0[0])
	var workers time.Duration
	for i := 1; i < len(cpu1); i++ {
		workers += cpu1[i] - cpu0[i]
	}
	res.WorkersCPUPct = pct(workers)
	res.TotalCPUPct = round(res.MasterCPUPct+res.WorkersCPUPct, 2)
	res.MachineCPUPct = round(res.TotalCPUPct/float64(runtime.NumCPU()), 2)
	if res.MasterPeakRSSMB, err = procPeakRSSMB(pid); err != nil {
		return err
	}
	for _, k := range kids {
		mb, err := procPeakRSSMB(k)
		if err != nil {
			return err
		}
		res.WorkerPeakRSSMB = max(res.WorkerPeakRSSMB, round(mb, 1))
	}
	res.MasterPeakRSSMB = round(res.MasterPeakRSSMB, 1)
	res.XactPerSec = round(float64(x1-x0)/secs, 1)
	res.Restarted = !slicesEqual(kids, procChildren(pid))
	b.rep.Idle = res
	note := fmt.Sprintf("%d s, master + %d fleet:work (%d supervisors × %d queues)", b.f.IdleSecs, res.Processes, benchIdleSupervisors, benchIdleQueues)
	b.addRow("idle", "CPU, master + workers", fmt.Sprintf("%.2f %% of one core", res.TotalCPUPct),
		fmt.Sprintf("%s; master %.2f %%, workers %.2f %%, %.2f %% of %d cores", note, res.MasterCPUPct, res.WorkersCPUPct, res.MachineCPUPct, runtime.NumCPU()))
	b.addRow("idle", "peak RSS", fmt.Sprintf("master %.1f MB, worker max %.1f MB", res.MasterPeakRSSMB, res.WorkerPeakRSSMB), "VmHWM")
	b.addRow("idle", "transactions on the database", fmt.Sprintf("%.1f /s", res.XactPerSec),
		"pg_stat_database.xact_commit delta (whole database; stats lag up to ~10 s on idle connections)")
	if res.Restarted {
		b.addRow("idle", "warning", "workers restarted during the window", "their CPU before the restart is missing")
	}
	return nil
}

func cpuOf(pids []int) ([]time.Duration, error) {
	out := make([]time.Duration, len(pids))
	for i, p := range pids {
		d, err := procCPU(p)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ---- backlog

type backlogResult struct {
	Backlog        int          `json:"backlog"`
	ClaimQueryMs   latencyStats `json:"claim_ms"`
	WorkloadMs     latencyStats `json:"workload_ms"`
	ScrapeMs       latencyStats `json:"metrics_scrape_ms"`
	ScrapeBytes    int          `json:"metrics_scrape_bytes"`
	MaxRate        benchRate    `json:"max_rate"`
	TargetPerSec   float64      `json:"dispatch_target_per_sec"`
	DispatchedRate float64      `json:"dispatched_per_sec"`
	SustainSecs    float64      `json:"sustain_secs"`
	WindowSecs     float64      `json:"window_secs"`
	First          benchRate    `json:"first_window"`
	Last           benchRate    `json:"last_window"`
	// Stable: the drain did not slow down, its last window at least 90 %
	// of its first (a faster end, as the backlog or a vacuum's load eases,
	// is no decay).
	Stable       bool  `json:"last_at_least_90pct_of_first"`
	BacklogStart int64 `json:"backlog_at_sustain_start"`
	BacklogEnd   int64 `json:"backlog_at_sustain_end"`
}

// timeN runs fn n times and returns the statistics of its durations.
func timeN(ctx context.Context, n int, fn func(context.Context) error) (latencyStats, error) {
	var ds []time.Duration
	for range n {
		start := time.Now()
		if err := fn(ctx); err != nil {
			return latencyStats{}, err
		}
		ds = append(ds, time.Since(start))
	}
	return statsOf(ds), nil
}

func (b *bench) backlog(ctx context.Context) error {
	q := Prefix + "backlog"
	n := b.f.Backlog
	res := &backlogResult{Backlog: n}
	if err := b.insert(ctx, q, n); err != nil {
		return err
	}
	var err error
	b.progressf("backlog: timing a claim, Workload and a /metrics scrape, %d times each", benchProbeSamples)
	// fleet's own claim of 100, as a worker makes it; the jobs go back
	// after each, outside the timing.
	var claims []time.Duration
	for range benchProbeSamples {
		start := time.Now()
		jobs, err := b.st.JobClaim(ctx, store.JobClaimParams{Queue: q, Limit: 100, Worker: Prefix + "probe"})
		claims = append(claims, time.Since(start))
		if err == nil && len(jobs) != 100 {
			err = fmt.Errorf("claim took %d jobs, want 100", len(jobs))
		}
		if err != nil {
			return err
		}
		leases := make([]store.Lease, len(jobs))
		for i, j := range jobs {
			leases[i] = j.Lease()
		}
		if _, err := b.st.JobRelease(ctx, store.JobReleaseParams{Leases: leases, Uncount: true}); err != nil {
			return err
		}
	}
	res.ClaimQueryMs = statsOf(claims)
	if res.WorkloadMs, err = timeN(ctx, benchProbeSamples, func(ctx context.Context) error {
		_, err := b.st.Workload(ctx)
		return err
	}); err != nil {
		return err
	}
	// A collector that reads the database at every scrape, served as
	// "app fleet" serves it.
	h := metrics.Handler(metrics.NewCollector(b.st.Pool(), metrics.Options{CacheTTL: time.Nanosecond, Logger: b.log}))
	if res.ScrapeMs, err = timeN(ctx, benchProbeSamples, func(ctx context.Context) error {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			return fmt.Errorf("/metrics: status %d: %s", rec.Code, rec.Body.String())
		}
		res.ScrapeBytes = rec.Body.Len()
		return nil
	}); err != nil {
		return err
	}

	f, err := b.startFleet(ctx, q, benchDrainProcesses, benchDrainConc)
	if err != nil {
		return err
	}
	defer func() { _, _ = f.stop() }()
	var dispatched atomic.Int64
	done := func(ctx context.Context) (int64, error) {
		d := dispatched.Load()
		size, err := b.db.queueSize(ctx, q)
		return int64(n) + d - size, err
	}
	// Wait for the first finished job, then measure the fleet's drain rate.
	for {
		d, err := done(ctx)
		if err != nil {
			return err
		}
		if d > 0 {
			break
		}
		if err := f.failedIfStopped(); err != nil {
			return err
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	window := min(benchMaxRateWindow, b.f.Sustain/4)
	b.progressf("backlog: measuring the drain rate of the fleet (%d × concurrency %d) over %s", benchDrainProcesses, benchDrainConc, window)
	stop := b.progress(ctx, "backlog max rate", 0, done)
	d0, err := done(ctx)
	if err != nil {
		stop()
		return err
	}
	t0 := time.Now()
	err = sleepCtx(ctx, window)
	stop()
	if err != nil {
		return err
	}
	d1, err := done(ctx)
	if err != nil {
		return err
	}
	res.MaxRate = b.rate(d1-d0, time.Since(t0))
	res.TargetPerSec = round(benchSustainShare*res.MaxRate.JobsPerSec, 1)
	if res.BacklogStart, err = b.db.queueSize(ctx, q); err != nil {
		return err
	}

	b.progressf("backlog: sustained drain for %s while dispatching %.0f jobs/s (%.0f %% of %.0f)", b.f.Sustain,
		res.TargetPerSec, 100*benchSustainShare, res.MaxRate.JobsPerSec)
	type sample struct {
		at   time.Time
		done int64
	}
	var samples []sample
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var dispErr error
	start := time.Now()
	wg.Go(func() { dispErr = b.dispatchAt(sctx, q, res.TargetPerSec, &dispatched) })
	stop = b.progress(ctx, "backlog sustain", 0, done)
	tick := time.NewTicker(time.Second)
	end := start.Add(b.f.Sustain)
	d, err := done(ctx)
	samples = append(samples, sample{time.Now(), d})
	for err == nil && time.Now().Before(end) {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-tick.C:
			err = f.failedIfStopped()
		}
		if err == nil {
			if d, err = done(ctx); err == nil {
				samples = append(samples, sample{time.Now(), d})
			}
		}
	}
	tick.Stop()
	cancel()
	wg.Wait()
	stop()
	if err := errors.Join(err, ignoreCanceled(dispErr)); err != nil {
		return err
	}
	res.SustainSecs = round(time.Since(start).Seconds(), 1)
	res.DispatchedRate = round(float64(dispatched.Load())/time.Since(start).Seconds(), 1)
	if res.BacklogEnd, err = b.db.queueSize(ctx, q); err != nil {
		return err
	}
	w := min(time.Minute, b.f.Sustain/10)
	res.WindowSecs = w.Seconds()
	between := func(from, to time.Time) benchRate {
		var a, z sample
		for _, s := range samples {
			if a.at.IsZero() && !s.at.Before(from) {
				a = s
			}
			if !s.at.After(to) {
				z = s
			}
		}
		return b.rate(z.done-a.done, z.at.Sub(a.at))
	}
	last := samples[len(samples)-1].at
	res.First = between(samples[0].at, samples[0].at.Add(w))
	res.Last = between(last.Add(-w), last)
	res.Stable = res.First.JobsPerSec > 0 && res.Last.JobsPerSec >= 0.9*res.First.JobsPerSec
	if _, err := f.stop(); err != nil {
		return err
	}
	b.rep.Backlog = res
	size := fmt.Sprintf("%d pending", n)
	b.addRow("backlog", "JobClaim of 100 (then released)", res.ClaimQueryMs.String(), size)
	b.addRow("backlog", "store.Workload", res.WorkloadMs.String(), size)
	b.addRow("backlog", "/metrics scrape (in process)", res.ScrapeMs.String(), fmt.Sprintf("%s, %d bytes", size, res.ScrapeBytes))
	b.addRate("backlog", "drain rate, no dispatch", res.MaxRate, fmt.Sprintf("over %s, fleet %d × concurrency %d", window, benchDrainProcesses, benchDrainConc))
	stable := "no"
	if res.Stable {
		stable = "yes"
	}
	b.addRate("backlog", fmt.Sprintf("sustained drain, first %s", w), res.First,
		fmt.Sprintf("dispatching %.0f/s (target %.0f/s) for %s", res.DispatchedRate, res.TargetPerSec, b.f.Sustain))
	b.addRate("backlog", fmt.Sprintf("sustained drain, last %s", w), res.Last,
		fmt.Sprintf("at least 90 %% of the first: %s; backlog %d → %d", stable, res.BacklogStart, res.BacklogEnd))
	return nil
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// dispatchAt dispatches no-op jobs on queue at perSec through the client,
// every 100 ms the jobs due by then, until ctx ends.
func (b *bench) dispatchAt(ctx context.Context, q string, perSec float64, dispatched *atomic.Int64) error {
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var sent int64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		due := int64(perSec*time.Since(start).Seconds()) - sent
		for due > 0 {
			k := min(due, 5000)
			jobs := make([]*queue.JobSpec, k)
			for i := range jobs {
				jobs[i] = queue.NewJob(JobName, nil).OnQueue(q)
			}
			if _, err := b.client.DispatchMany(ctx, jobs); err != nil {
				return err
			}
			sent += k
			due -= k
			dispatched.Add(k)
		}
	}
}

// ---- scale

type scaleCell struct {
	Backlog     int       `json:"backlog"`
	Concurrency int       `json:"concurrency"`
	Rate        benchRate `json:"rate"`
	TimeBoxed   bool      `json:"time_boxed"`
}

type scaleResult struct {
	CellSecs int         `json:"cell_secs"`
	Cells    []scaleCell `json:"cells"`
	Grid     []string    `json:"-"`
}

func (b *bench) scale(ctx context.Context) error {
	backlogs, _ := parseInts("--scale-backlogs", b.f.ScaleBacklogs)
	concs, _ := parseInts("--scale-concurrency", b.f.ScaleConcurrency)
	q := Prefix + "scale"
	res := &scaleResult{CellSecs: b.f.CellSecs}
	mode := fmt.Sprintf("each cell time-boxed to %d s from the worker's ready report, backlog topped up every %s", b.f.CellSecs, benchTopUpEvery)
	if b.f.CellSecs == 0 {
		mode = "each cell a full drain (--cell-secs 0), from the worker's ready report to queue empty"
	}
	b.progressf("scale: one fleet:work process per cell; %s", mode)
	for _, n := range backlogs {
		for _, c := range concs {
			if err := b.topUp(ctx, q, n, nil); err != nil {
				return err
			}
			cell, err := b.scaleCell(ctx, q, n, c)
			if err != nil {
				return fmt.Errorf("cell backlog %d × concurrency %d: %w", n, c, err)
			}
			res.Cells = append(res.Cells, cell)
			how := "full drain"
			if cell.TimeBoxed {
				how = fmt.Sprintf("time-boxed %d s", b.f.CellSecs)
			}
			b.addRate("scale", fmt.Sprintf("backlog %d × concurrency %d", n, c), cell.Rate, "1 fleet:work, "+how)
		}
	}
	// The grid: backlogs down, concurrencies across.
	head := []string{"backlog \\ concurrency"}
	for _, c := range concs {
		head = append(head, strconv.Itoa(c))
	}
	res.Grid = append(res.Grid, strings.Join(head, "\t"))
	i := 0
	for _, n := range backlogs {
		line := []string{strconv.Itoa(n)}
		for range concs {
			cell := res.Cells[i]
			i++
			s := fmt.Sprintf("%.0f/s", cell.Rate.JobsPerSec)
			if b.ref > 0 {
				s += fmt.Sprintf(" (%.3f×)", cell.Rate.VsBound)
			}
			line = append(line, s)
		}
		res.Grid = append(res.Grid, strings.Join(line, "\t"))
	}
	res.Grid = append(res.Grid, "("+mode+"; × = ratio to the bound)")
	b.rep.Scale = res
	return nil
}

// topUp inserts the jobs that bring queue up to n; added counts them.
func (b *bench) topUp(ctx context.Context, q string, n int, added *atomic.Int64) error {
	size, err := b.db.queueSize(ctx, q)
	if err != nil {
		return err
	}
	if missing := int64(n) - size; missing > 0 {
		if added == nil && missing > benchInsertChunk {
			return b.insert(ctx, q, int(missing))
		}
		if err := b.db.insert(ctx, q, JobName, int(missing)); err != nil {
			return err
		}
		if added != nil {
			added.Add(missing)
		}
	}
	return nil
}

// scaleCell measures one fleet:work process with concurrency c on a backlog
// of n jobs.
func (b *bench) scaleCell(ctx context.Context, q string, n, c int) (scaleCell, error) {
	cell := scaleCell{Backlog: n, Concurrency: c, TimeBoxed: b.f.CellSecs > 0}
	args := []string{"fleet:work", "--queue", q, "--concurrency", strconv.Itoa(c), "--reports"}
	if !cell.TimeBoxed {
		args = append(args, "--stop-when-empty")
	}
	env, err := b.childEnv()
	if err != nil {
		return cell, err
	}
	p, err := b.startProc(args, env)
	if err != nil {
		return cell, err
	}
	defer func() { _ = p.stop() }()
	if err := p.waitReady(ctx, 30*time.Second); err != nil {
		return cell, err
	}
	var added atomic.Int64
	size0 := int64(n)
	done := func(ctx context.Context) (int64, error) {
		a := added.Load()
		size, err := b.db.queueSize(ctx, q)
		return size0 + a - size, err
	}
	label := fmt.Sprintf("scale %d × %d", n, c)
	t0 := time.Now()
	if !cell.TimeBoxed {
		stop := b.progress(ctx, label, int64(n), done)
		emptyAt, err := b.waitEmpty(ctx, p.exited, q, 20*time.Millisecond)
		stop()
		if err != nil {
			return cell, err
		}
		cell.Rate = b.rate(int64(n), emptyAt.Sub(t0))
		return cell, p.stop()
	}
	stop := b.progress(ctx, label, 0, done)
	defer stop()
	end := t0.Add(time.Duration(b.f.CellSecs) * time.Second)
	for time.Now().Before(end) {
		if err := b.topUp(ctx, q, n, &added); err != nil {
			return cell, err
		}
		select {
		case <-p.done:
			return cell, fmt.Errorf("fleet:work exited during the cell: %v", p.err)
		default:
		}
		if err := sleepCtx(ctx, min(benchTopUpEvery, time.Until(end))); err != nil {
			return cell, err
		}
	}
	d, err := done(ctx)
	if err != nil {
		return cell, err
	}
	cell.Rate = b.rate(d, time.Since(t0))
	stop()
	return cell, p.stop()
}
