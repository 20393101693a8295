package bench

import (
	"context"
	"fmt"
	"strings"
)

// The held scenario: the same backlog drained by a master with and
// without another session's transaction held open meanwhile (a report, a
// forgotten BEGIN, a replica with hot_standby_feedback), in rounds that
// alternate the two, each round's order the reverse of the one before
// (free then held, held then free, ...), so that the machine's drift
// touches both alike. While the transaction is open no row version that
// the drain's claims and finishes leave behind can be cleaned up: the
// scenario measures how much that costs the drain.
const (
	heldProcesses = 2
	heldConc      = 200
)

// heldResult is the held scenario's part of the JSON document.
type heldResult struct {
	Jobs        int `json:"jobs"`
	Rounds      int `json:"rounds"`
	Processes   int `json:"processes"`
	Concurrency int `json:"concurrency"`
	// Free and Held are the rounds' rates without and with the held
	// transaction, in the order they ran.
	Free pathRates `json:"free"`
	Held pathRates `json:"held"`
	// Ratios are each round's held rate over its free one; Ratio is the
	// medians' ratio, the figure the scenario is judged by.
	Ratios []float64 `json:"round_ratios"`
	Ratio  float64   `json:"held_vs_free"`
	// DeadRows are the dead row versions of queue_jobs by the server's
	// statistics at the end of each held drain (approximate: they lag):
	// what the held transaction kept from being cleaned up.
	DeadRows []int64 `json:"dead_rows_after_held"`
}

func (b *bench) held(ctx context.Context) error {
	q := Prefix + "held"
	n := b.f.Jobs
	res := &heldResult{Jobs: n, Rounds: b.f.Rounds, Processes: heldProcesses, Concurrency: heldConc,
		Free: pathRates{Processes: heldProcesses, Concurrency: heldConc},
		Held: pathRates{Processes: heldProcesses, Concurrency: heldConc}}
	b.progressf("held: %d rounds of %d no-op jobs through a master of %d × %d, without and with a transaction held open by another session, alternated",
		res.Rounds, n, heldProcesses, heldConc)
	for round := range res.Rounds {
		order := []bool{false, true}
		if round%2 == 1 {
			order = []bool{true, false}
		}
		var free, held float64
		for _, withHold := range order {
			rate, dead, err := b.heldDrain(ctx, q, n, withHold)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, map[bool]string{false: "free", true: "held"}[withHold], err)
			}
			if withHold {
				held = rate
				res.Held.JobsPerSec = append(res.Held.JobsPerSec, rate)
				res.DeadRows = append(res.DeadRows, dead)
			} else {
				free = rate
				res.Free.JobsPerSec = append(res.Free.JobsPerSec, rate)
			}
		}
		res.Ratios = append(res.Ratios, round3(held/free))
		b.progressf("held: round %d: free %.0f jobs/s, held %.0f jobs/s: %.3f×", round+1, free, held, held/free)
	}
	res.Free.median()
	res.Held.median()
	res.Ratio = round3(res.Held.Median / res.Free.Median)
	b.rep.Held = res
	note := fmt.Sprintf("median of %d rounds of %d jobs", res.Rounds, n)
	b.addRate("held", fmt.Sprintf("master %d × %d, no transaction held", heldProcesses, heldConc),
		b.withBound(benchRate{Jobs: int64(n), Secs: round(float64(n)/res.Free.Median, 3), JobsPerSec: res.Free.Median}), note)
	b.addRate("held", fmt.Sprintf("master %d × %d, a transaction held open", heldProcesses, heldConc),
		b.withBound(benchRate{Jobs: int64(n), Secs: round(float64(n)/res.Held.Median, 3), JobsPerSec: res.Held.Median}),
		note+fmt.Sprintf("; dead rows left %v", res.DeadRows))
	rounds := make([]string, len(res.Ratios))
	for i, r := range res.Ratios {
		rounds[i] = fmt.Sprintf("%.3f", r)
	}
	b.addRow("held", "held / free", fmt.Sprintf("%.3f×", res.Ratio), "medians; by round "+strings.Join(rounds, ", "))
	return nil
}

// heldDrain is one drain of the held scenario: n jobs through a master,
// with a transaction held open by another connection from before the
// jobs are inserted until the queue is empty when withHold. It returns
// the rate and, with the hold, the dead rows of queue_jobs the server
// counted at the end. Every drain starts on a vacuumed table: the hold
// ends before the cleanup after it.
func (b *bench) heldDrain(ctx context.Context, q string, n int, withHold bool) (float64, int64, error) {
	var release func()
	if withHold {
		h, err := b.db.hold(ctx, b.url)
		if err != nil {
			return 0, 0, err
		}
		release = h.release
		defer func() { release() }()
	}
	md, err := b.masterDrain(ctx, q, n, heldProcesses, heldConc)
	if err == nil {
		err = drainFailed(md.failed)
	}
	if err != nil {
		return 0, 0, err
	}
	var dead int64
	if withHold {
		if dead, err = b.db.deadRows(ctx, "queue_jobs"); err != nil {
			return 0, 0, err
		}
		release()
		release = func() {}
	}
	if err := b.cleanup(ctx, "after a held drain"); err != nil {
		return 0, 0, err
	}
	return md.rate.JobsPerSec, dead, nil
}

// round3 rounds x to three places.
func round3(x float64) float64 { return round(x, 3) }
