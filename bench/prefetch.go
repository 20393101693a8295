package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleet-go/fleet/queue"
)

// The prefetch scenario: a master of 3 processes × 4 slots, its workers
// listening, is dispatched 300 short jobs, then 12 jobs of 3 s: 12 slots
// for 12 slow jobs, so none needs to wait for another. How far apart the
// slow jobs start says whether one waited behind another worker's
// prefetch; how many each worker ran says how the work spread. It runs
// with short jobs of 5 ms (the setting of the issue that found a worker
// hoarding; no worker prefetches at that runtime) and of 0 ms (every
// worker prefetches, up to 512 jobs), each --rounds times.
const (
	prefetchProcesses = 3
	prefetchConc      = 4
	prefetchShort     = 300
	prefetchSlow      = 12
	prefetchSlowMS    = 3000
)

// prefetchShortMS are the short jobs' runtimes the scenario runs with.
var prefetchShortMS = []int{5, 0}

// SleepJobName is the bench's handler that sleeps {"ms": N} (or until its
// context ends), registered with JobName (see Register).
const SleepJobName = "fleet.bench.sleep"

// sleepJob is SleepJobName's handler.
func sleepJob(ctx context.Context, job *queue.Job) error {
	var p struct {
		MS int `json:"ms"`
	}
	if err := job.Decode(&p); err != nil {
		return err
	}
	t := time.NewTimer(time.Duration(p.MS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// prefetchResult is the prefetch scenario's part of the JSON document.
type prefetchResult struct {
	Processes   int `json:"processes"`
	Concurrency int `json:"concurrency"`
	ShortJobs   int `json:"short_jobs"`
	SlowJobs    int `json:"slow_jobs"`
	SlowMs      int `json:"slow_ms"`
	// Settings are the runs of each short-job runtime.
	Settings []prefetchSetting `json:"settings"`
}

// prefetchSetting is the runs with one short-job runtime.
type prefetchSetting struct {
	ShortMs int           `json:"short_ms"`
	Runs    []prefetchRun `json:"runs"`
	// MaxSpreadMs is the largest start spread of the runs.
	MaxSpreadMs float64 `json:"max_slow_start_spread_ms"`
}

// prefetchRun is one run.
type prefetchRun struct {
	// SpreadMs is how far apart the first and the last slow job started
	// (fleet_jobs.started_at).
	SpreadMs float64 `json:"slow_start_spread_ms"`
	// MaxClaimToStartMs is the longest a slow job's completed attempt
	// waited between its claim and its start.
	MaxClaimToStartMs float64 `json:"slow_max_claim_to_start_ms"`
	// SlowPerWorker and JobsPerWorker are the slow jobs and all the jobs
	// each worker ran, largest first.
	SlowPerWorker []int `json:"slow_jobs_per_worker"`
	JobsPerWorker []int `json:"jobs_per_worker"`
	// Attempts counts the attempts past the first (none expected).
	Retried int64 `json:"attempts_past_first"`
}

func (b *bench) prefetch(ctx context.Context) error {
	q := Prefix + "prefetch"
	res := &prefetchResult{Processes: prefetchProcesses, Concurrency: prefetchConc, ShortJobs: prefetchShort,
		SlowJobs: prefetchSlow, SlowMs: prefetchSlowMS}
	b.progressf("prefetch: a master of %d × %d, %d jobs of %v ms then %d jobs of %d ms, %d rounds",
		prefetchProcesses, prefetchConc, prefetchShort, prefetchShortMS, prefetchSlow, prefetchSlowMS, b.f.Rounds)
	for _, ms := range prefetchShortMS {
		res.Settings = append(res.Settings, prefetchSetting{ShortMs: ms})
	}
	for round := range b.f.Rounds {
		for i := range res.Settings {
			set := &res.Settings[i]
			run, err := b.prefetchRun(ctx, q, set.ShortMs)
			if err != nil {
				return fmt.Errorf("round %d, short jobs of %d ms: %w", round+1, set.ShortMs, err)
			}
			set.Runs = append(set.Runs, run)
			set.MaxSpreadMs = max(set.MaxSpreadMs, run.SpreadMs)
			b.progressf("prefetch: round %d, short jobs of %d ms: slow jobs started %.0f ms apart, slow per worker %v, all per worker %v",
				round+1, set.ShortMs, run.SpreadMs, run.SlowPerWorker, run.JobsPerWorker)
			if err := b.cleanup(ctx, "after a prefetch run"); err != nil {
				return err
			}
		}
	}
	b.rep.Prefetch = res
	for _, set := range res.Settings {
		var spreads, slow, all []string
		for _, r := range set.Runs {
			spreads = append(spreads, fmt.Sprintf("%.0f", r.SpreadMs))
			slow = append(slow, joinInts(r.SlowPerWorker, "/"))
			all = append(all, joinInts(r.JobsPerWorker, "/"))
		}
		b.addRow("prefetch", fmt.Sprintf("slow jobs' start spread, short jobs of %d ms", set.ShortMs),
			fmt.Sprintf("%.0f ms (max)", set.MaxSpreadMs),
			fmt.Sprintf("rounds %s ms; slow per worker %s; all per worker %s",
				strings.Join(spreads, ", "), strings.Join(slow, ", "), strings.Join(all, ", ")))
	}
	return nil
}

// prefetchRun starts the master, waits for its workers to listen,
// dispatches the short jobs then the slow ones, and reads how they ran
// once the queue is empty.
func (b *bench) prefetchRun(ctx context.Context, q string, shortMS int) (prefetchRun, error) {
	var run prefetchRun
	f, err := b.startFleet(ctx, q, prefetchProcesses, prefetchConc)
	if err != nil {
		return run, err
	}
	defer func() { _, _ = f.stop() }()
	if err := b.waitListening(ctx, f, prefetchProcesses); err != nil {
		return run, err
	}
	short, err := sleepJobs(q, prefetchShort, shortMS)
	if err != nil {
		return run, err
	}
	if _, err := b.client.DispatchMany(ctx, short); err != nil {
		return run, fmt.Errorf("dispatch the short jobs: %w", err)
	}
	slow, err := sleepJobs(q, prefetchSlow, prefetchSlowMS)
	if err != nil {
		return run, err
	}
	res, err := b.client.DispatchMany(ctx, slow)
	if err != nil {
		return run, fmt.Errorf("dispatch the slow jobs: %w", err)
	}
	if _, err := b.waitEmpty(ctx, f.failedIfStopped, q, 20*time.Millisecond); err != nil {
		return run, err
	}
	if _, err := f.stop(); err != nil {
		return run, err
	}
	return b.db.prefetchRun(ctx, q, queue.IDs(res))
}

// sleepJobs are n jobs of SleepJobName on q that sleep ms each.
func sleepJobs(q string, n, ms int) ([]*queue.JobSpec, error) {
	payload, err := json.Marshal(map[string]int{"ms": ms})
	if err != nil {
		return nil, err
	}
	jobs := make([]*queue.JobSpec, n)
	for i := range jobs {
		jobs[i] = queue.NewJob(SleepJobName, json.RawMessage(payload)).OnQueue(q)
	}
	return jobs, nil
}

// waitListening waits until n of the master's workers listen for
// notifications: their claim loop runs, and a dispatch wakes them.
func (b *bench) waitListening(ctx context.Context, f *benchFleet, n int) error {
	deadline := time.Now().Add(benchStallAfter)
	for {
		k, err := b.db.listeningWorkers(ctx)
		if err != nil {
			return err
		}
		if k >= n {
			return nil
		}
		if err := f.failedIfStopped(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d workers listening after %s", k, n, benchStallAfter)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// joinInts joins ns with sep.
func joinInts(ns []int, sep string) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, sep)
}

// perWorker turns counts by worker into counts, largest first.
func perWorker(m map[string]int) []int {
	out := make([]int, 0, len(m))
	for _, n := range m {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b int) int { return cmp.Compare(b, a) })
	return out
}

// errPrefetchIncomplete says a prefetch run's slow jobs did not all
// complete.
var errPrefetchIncomplete = errors.New("not every slow job completed")
