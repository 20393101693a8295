package bench

import (
	"context"
	"fmt"
	"strings"
)

// The held scenario: the same backlog drained by a master process with
// and without another session's transaction held open meanwhile (a
// report, a forgotten BEGIN, a replica with hot_standby_feedback), in
// rounds that alternate the two, each round's order the reverse of the
// one before (free then held, held then free, ...), so that the machine's
// drift touches both alike. While the transaction is open no row version
// that the drain's claims and finishes leave behind can be cleaned up:
// the scenario measures what that costs the drain, in time and in CPU (of
// fleet's processes and of the server processes of their sessions, which
// a machine shared with other work disturbs less than the time).
const (
	heldProcesses = 2
	heldConc      = 200
)

// heldRound is one drain of the held scenario: its rate from the first
// claim to the queue found empty, the CPU it cost per 1000 jobs (see
// coldRound), and, with the hold, the dead row versions of queue_jobs the
// server counted at its end (approximate: its statistics lag).
type heldRound struct {
	JobsPerSec  float64 `json:"jobs_per_sec"`
	FleetCPU    float64 `json:"fleet_cpu_ms_per_1000_jobs"`
	DatabaseCPU float64 `json:"database_cpu_ms_per_1000_jobs"`
	DeadRows    int64   `json:"dead_rows,omitempty"`
}

// heldPath is the rounds of one side and their medians.
type heldPath struct {
	Rounds []heldRound `json:"rounds"`
	// Median is the median rate; MedianCPU the median CPU per 1000 jobs,
	// fleet's and the database's together.
	Median    float64 `json:"median_jobs_per_sec"`
	MedianCPU float64 `json:"median_cpu_ms_per_1000_jobs"`
}

func (p *heldPath) medians() {
	var rate, cpu pathRates
	for _, r := range p.Rounds {
		rate.JobsPerSec = append(rate.JobsPerSec, r.JobsPerSec)
		cpu.JobsPerSec = append(cpu.JobsPerSec, r.FleetCPU+r.DatabaseCPU)
	}
	rate.median()
	cpu.median()
	p.Median, p.MedianCPU = rate.Median, round(cpu.Median, 1)
}

// heldResult is the held scenario's part of the JSON document.
type heldResult struct {
	Jobs        int      `json:"jobs"`
	Processes   int      `json:"processes"`
	Concurrency int      `json:"concurrency"`
	Free        heldPath `json:"free"`
	Held        heldPath `json:"held"`
	// Ratios are each round's held rate over its free one; Ratio is the
	// medians' ratio, the figure the scenario is judged by; CPURatio is
	// the held median CPU per job over the free one.
	Ratios   []float64 `json:"round_ratios"`
	Ratio    float64   `json:"held_vs_free"`
	CPURatio float64   `json:"held_vs_free_cpu_per_job"`
}

func (b *bench) held(ctx context.Context) error {
	q := Prefix + "held"
	n := b.f.Jobs
	res := &heldResult{Jobs: n, Processes: heldProcesses, Concurrency: heldConc}
	b.progressf("held: %d rounds of %d no-op jobs through a master process of %d × %d, without and with a transaction held open by another session, alternated",
		b.f.Rounds, n, heldProcesses, heldConc)
	for i := range b.f.Rounds {
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		var free, held heldRound
		for _, withHold := range order {
			r, err := b.heldDrain(ctx, q, n, withHold)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", i+1, map[bool]string{false: "free", true: "held"}[withHold], err)
			}
			if withHold {
				held = r
				res.Held.Rounds = append(res.Held.Rounds, r)
			} else {
				free = r
				res.Free.Rounds = append(res.Free.Rounds, r)
			}
		}
		res.Ratios = append(res.Ratios, round(held.JobsPerSec/free.JobsPerSec, 3))
		b.progressf("held: round %d: free %.0f jobs/s, held %.0f jobs/s: %.3f×; CPU per 1000 jobs %.0f and %.0f ms",
			i+1, free.JobsPerSec, held.JobsPerSec, held.JobsPerSec/free.JobsPerSec,
			free.FleetCPU+free.DatabaseCPU, held.FleetCPU+held.DatabaseCPU)
	}
	res.Free.medians()
	res.Held.medians()
	res.Ratio = round(res.Held.Median/res.Free.Median, 3)
	if res.Free.MedianCPU > 0 {
		res.CPURatio = round(res.Held.MedianCPU/res.Free.MedianCPU, 3)
	}
	b.rep.Held = res
	note := fmt.Sprintf("median of %d rounds of %d jobs, first claim to queue empty", b.f.Rounds, n)
	var dead []string
	for _, r := range res.Held.Rounds {
		dead = append(dead, fmt.Sprint(r.DeadRows))
	}
	for _, side := range []struct {
		p    heldPath
		what string
		note string
	}{
		{res.Free, "no transaction held", ""},
		{res.Held, "a transaction held open", "; dead rows left " + strings.Join(dead, ", ")},
	} {
		b.addRate("held", fmt.Sprintf("master %d × %d, %s", heldProcesses, heldConc, side.what),
			b.withBound(benchRate{Jobs: int64(n), Secs: round(float64(n)/side.p.Median, 3), JobsPerSec: side.p.Median}),
			fmt.Sprintf("%s; CPU per 1000 jobs %.0f ms%s", note, side.p.MedianCPU, side.note))
	}
	rounds := make([]string, len(res.Ratios))
	for i, r := range res.Ratios {
		rounds[i] = fmt.Sprintf("%.3f", r)
	}
	b.addRow("held", "held / free", fmt.Sprintf("%.3f×", res.Ratio),
		fmt.Sprintf("medians; by round %s; CPU per job %.3f×", strings.Join(rounds, ", "), res.CPURatio))
	return nil
}

// heldDrain is one drain of the held scenario: n jobs through a master
// process, with a transaction held open by another connection from before
// the jobs are inserted until the queue is empty when withHold. Every
// drain starts on a vacuumed table: the hold ends before the cleanup
// after it.
func (b *bench) heldDrain(ctx context.Context, q string, n int, withHold bool) (heldRound, error) {
	release := func() {}
	defer func() { release() }()
	if withHold {
		h, err := b.db.hold(ctx, b.url)
		if err != nil {
			return heldRound{}, err
		}
		release = h.release
	}
	c, err := b.mastersDrain(ctx, q, n, 1, heldProcesses, heldConc)
	if err != nil {
		return heldRound{}, err
	}
	r := heldRound{JobsPerSec: round(float64(n)/(c.Secs-c.StartupSecs), 1), FleetCPU: c.FleetCPU, DatabaseCPU: c.DatabaseCPU}
	if withHold {
		if r.DeadRows, err = b.db.deadRows(ctx, "queue_jobs"); err != nil {
			return heldRound{}, err
		}
	}
	release()
	release = func() {}
	if err := b.cleanup(ctx, "after a held drain"); err != nil {
		return heldRound{}, err
	}
	return r, nil
}
