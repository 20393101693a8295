package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// The paths scenario: the same backlog drained by one fleet:work at a
// high and at a low concurrency, and through a master whose two children
// split the high one, in rounds that alternate the three so that the
// machine's drift touches them alike.
const (
	pathsHighConc  = 1000
	pathsLowConc   = 64
	pathsProcesses = 2
)

// pathsResult is the paths scenario's part of the JSON document: the
// median rate of each path over the rounds, and the ratios the hot path
// is judged by.
type pathsResult struct {
	Jobs   int       `json:"jobs"`
	Rounds int       `json:"rounds"`
	High   pathRates `json:"one_process_high"`
	Low    pathRates `json:"one_process_low"`
	Master pathRates `json:"master"`
	// LowVsHigh is Low's median over High's, MasterVsOne Master's over
	// High's, MasterVsDurable Master's over the durable bound's (0: the
	// bound did not run).
	LowVsHigh       float64 `json:"low_vs_high"`
	MasterVsOne     float64 `json:"master_vs_one_process"`
	MasterVsDurable float64 `json:"master_vs_durable_bound,omitempty"`
}

// pathRates are one path's rounds.
type pathRates struct {
	Processes   int       `json:"processes"`
	Concurrency int       `json:"concurrency"`
	JobsPerSec  []float64 `json:"jobs_per_sec"`
	Median      float64   `json:"median_jobs_per_sec"`
}

// median sets Median from the rounds' rates.
func (p *pathRates) median() {
	s := slices.Sorted(slices.Values(p.JobsPerSec))
	if n := len(s); n%2 == 1 {
		p.Median = s[n/2]
	} else {
		p.Median = round((s[n/2-1]+s[n/2])/2, 1)
	}
}

func (b *bench) paths(ctx context.Context) error {
	q := Prefix + "paths"
	n := b.f.Jobs
	res := &pathsResult{Jobs: n, Rounds: b.f.Rounds,
		High:   pathRates{Processes: 1, Concurrency: pathsHighConc},
		Low:    pathRates{Processes: 1, Concurrency: pathsLowConc},
		Master: pathRates{Processes: pathsProcesses, Concurrency: pathsHighConc / pathsProcesses}}
	b.progressf("paths: %d rounds of %d no-op jobs through one fleet:work × %d, one × %d, and a master of %d × %d; each from the first claim to the queue empty",
		res.Rounds, n, pathsHighConc, pathsLowConc, pathsProcesses, pathsHighConc/pathsProcesses)
	for round := range res.Rounds {
		for _, p := range []*pathRates{&res.High, &res.Low, &res.Master} {
			var r benchRate
			if p.Processes == 1 {
				var err error
				if r, err = b.workDrain(ctx, q, n, p.Concurrency); err != nil {
					return fmt.Errorf("round %d, one fleet:work × %d: %w", round+1, p.Concurrency, err)
				}
			} else {
				md, err := b.masterDrain(ctx, q, n, p.Processes, p.Concurrency)
				if err == nil {
					err = drainFailed(md.failed)
				}
				if err != nil {
					return fmt.Errorf("round %d, master %d × %d: %w", round+1, p.Processes, p.Concurrency, err)
				}
				r = md.rate
			}
			p.JobsPerSec = append(p.JobsPerSec, r.JobsPerSec)
			if err := b.cleanup(ctx, "after a paths drain"); err != nil {
				return err
			}
		}
	}
	for _, p := range []*pathRates{&res.High, &res.Low, &res.Master} {
		p.median()
	}
	res.LowVsHigh = round(res.Low.Median/res.High.Median, 3)
	res.MasterVsOne = round(res.Master.Median/res.High.Median, 3)
	if b.durable > 0 {
		res.MasterVsDurable = round(res.Master.Median/b.durable, 3)
	}
	b.rep.Paths = res
	for _, p := range []struct {
		r    pathRates
		what string
	}{{res.High, "one fleet:work"}, {res.Low, "one fleet:work"}, {res.Master, "master"}} {
		b.addRate("paths", fmt.Sprintf("%s, %d × concurrency %d", p.what, p.r.Processes, p.r.Concurrency),
			b.withBound(benchRate{Jobs: int64(n), Secs: round(float64(n)/p.r.Median, 3), JobsPerSec: p.r.Median}),
			fmt.Sprintf("median of %d rounds of %d jobs", res.Rounds, n))
	}
	note := ""
	if res.MasterVsDurable > 0 {
		note = fmt.Sprintf("; the master %.3f× the durable bound", res.MasterVsDurable)
	}
	b.addRow("paths", "ratios", fmt.Sprintf("concurrency %d / %d: %.3f×; master / one process: %.3f×",
		pathsLowConc, pathsHighConc, res.LowVsHigh, res.MasterVsOne), "medians"+note)
	return nil
}

// workDrain inserts n jobs into q and drains them with one fleet:work of
// concurrency c, timed from its first claim to the queue found empty; the
// bench stops it then.
func (b *bench) workDrain(ctx context.Context, q string, n, c int) (benchRate, error) {
	r, _, err := b.workDrainSince(ctx, q, n, c)
	return r, err
}

// workDrainSince is workDrain that also returns the rate from the
// process's start (just after the insert) to the queue found empty.
func (b *bench) workDrainSince(ctx context.Context, q string, n, c int) (benchRate, benchRate, error) {
	if err := b.insert(ctx, q, n); err != nil {
		return benchRate{}, benchRate{}, err
	}
	env, err := b.childEnv()
	if err != nil {
		return benchRate{}, benchRate{}, err
	}
	since := time.Now()
	p, err := b.startProc([]string{"fleet:work", "--queue", q, "--concurrency", strconv.Itoa(c), "--reports"}, env)
	if err != nil {
		return benchRate{}, benchRate{}, err
	}
	defer func() { _ = p.stop() }()
	stop := b.progress(ctx, fmt.Sprintf("fleet:work × %d", c), int64(n), b.doneOf(q, int64(n)))
	emptyAt, err := b.waitEmpty(ctx, p.exited, q, 20*time.Millisecond)
	stop()
	if err != nil {
		return benchRate{}, benchRate{}, err
	}
	if err := p.stop(); err != nil {
		return benchRate{}, benchRate{}, err
	}
	r, failed, err := b.drained(ctx, q, n, since, emptyAt)
	if err == nil {
		err = drainFailed(failed)
	}
	return r, b.rate(int64(n), emptyAt.Sub(since)), err
}
