package worker

import (
	"cmp"

	"github.com/fleet-go/fleet/store"
)

// The order in which a worker starts the jobs it holds: its queues in
// Config.Queues' order, and within a queue the order of a claim
// (store.ClaimOrder: lowest priority, then earliest available, then
// lowest id). A claim returns its batch in that order; the prefetch
// buffer is kept in it by merging each batch into the jobs still waiting.

// queueRanks maps each of queues to its place in the list (the first, if
// a name comes twice).
func queueRanks(queues []string) map[string]int {
	rank := make(map[string]int, len(queues))
	for i, q := range queues {
		if _, ok := rank[q]; !ok {
			rank[q] = i
		}
	}
	return rank
}

// startOrder compares two held jobs by the order they start in: the
// rank of their queue, then store.ClaimOrder.
func startOrder(rank map[string]int) func(a, b store.ClaimedJob) int {
	return func(a, b store.ClaimedJob) int {
		if a.Queue != b.Queue {
			if c := cmp.Compare(rank[a.Queue], rank[b.Queue]); c != 0 {
				return c
			}
		}
		return store.ClaimOrder(a, b)
	}
}

// mergeClaimed merges batch, one claim's jobs (which come in order, see
// store.JobClaim), into waiting, the prefetched jobs still waiting for a
// slot (in order), and returns the merged buffer, in order by order. Jobs
// that compare equal keep the waiting one first. It takes O(len(waiting)
// + len(batch)) and moves only the waiting jobs the batch goes before;
// batch is taken over when nothing waits.
//
// This is what makes priority hold across claims, not only within one: a
// job more urgent than the prefetched ones (a lower priority, or an
// earlier queue), dispatched while they wait, is taken by the worker's
// next claim, which comes once a quarter of its room (Concurrency plus
// the prefetch) is free (see roomToClaim), and then starts before every
// prefetched job still waiting. A prefetch thus delays a more urgent job
// by at most one claim: only the jobs that start before that claim
// returns go first.
func mergeClaimed[J any](waiting, batch []J, order func(a, b J) int) []J {
	if len(waiting) == 0 {
		return batch
	}
	i := len(waiting) - 1
	merged := append(waiting, batch...)
	// From the back: k is always i+j+1, so a write never lands on a
	// waiting job not yet moved.
	for j, k := len(batch)-1, len(merged)-1; j >= 0; k-- {
		if i >= 0 && order(batch[j], merged[i]) < 0 {
			merged[k] = merged[i]
			i--
		} else {
			merged[k] = batch[j]
			j--
		}
	}
	return merged
}
