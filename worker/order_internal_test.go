package worker

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet/store"
)

// TestMergeClaimedKeepsTheStartOrder merges claims into waiting jobs as
// the prefetch buffer gets them: a later claim's more urgent jobs (a
// lower priority, an earlier queue, an earlier available time) go before
// the waiting ones, and the result is what sorting both together gives.
func TestMergeClaimedKeepsTheStartOrder(t *testing.T) {
	t.Parallel()
	order := startOrder(queueRanks([]string{"high", "low", "high"}))
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	job := func(id int64, q string, priority int, avail time.Duration) store.ClaimedJob {
		return store.ClaimedJob{ID: id, Queue: q, Priority: priority, AvailableAt: at.Add(avail)}
	}
	ids := func(jobs []store.ClaimedJob) []int64 {
		out := make([]int64, len(jobs))
		for i, j := range jobs {
			out[i] = j.ID
		}
		return out
	}

	waiting := []store.ClaimedJob{job(1, "low", 5, 0), job(2, "low", 5, 0), job(3, "low", 5, time.Second)}
	// A second claim, of a more urgent job of the same queue, and of one
	// as urgent but available later than two of the waiting ones.
	buf := mergeClaimed(waiting, []store.ClaimedJob{job(9, "low", 1, time.Hour), job(8, "low", 5, time.Millisecond)}, order)
	if got, want := ids(buf), []int64{9, 1, 2, 8, 3}; !slices.Equal(got, want) {
		t.Fatalf("after a claim of queue low: %v, want %v", got, want)
	}
	// A claim of the first queue goes before everything of the second,
	// whatever its priority.
	buf = mergeClaimed(buf, []store.ClaimedJob{job(20, "high", 9, time.Hour)}, order)
	if got, want := ids(buf), []int64{20, 9, 1, 2, 8, 3}; !slices.Equal(got, want) {
		t.Fatalf("after a claim of queue high: %v, want %v", got, want)
	}
	// The same key but the id: the lower id first.
	buf = mergeClaimed(buf, []store.ClaimedJob{job(0, "low", 5, 0)}, order)
	if got, want := ids(buf), []int64{20, 9, 0, 1, 2, 8, 3}; !slices.Equal(got, want) {
		t.Fatalf("after a claim of an older id: %v, want %v", got, want)
	}
	// Nothing waiting: the claim is the buffer; nothing claimed: the
	// buffer is left as it was.
	claim := []store.ClaimedJob{job(4, "low", 0, 0)}
	if got := mergeClaimed(nil, claim, order); len(got) != 1 || &got[0] != &claim[0] {
		t.Errorf("a claim into an empty buffer was copied or changed: %v", ids(got))
	}
	if got := mergeClaimed(buf, nil, order); !slices.Equal(ids(got), ids(buf)) {
		t.Errorf("an empty claim changed the buffer: %v", ids(got))
	}

	// Random claims into a buffer that also gives its head away, as
	// startBuffered does: the buffer stays what sorting it gives.
	r := rand.New(rand.NewPCG(1, 2))
	queues := []string{"high", "low"}
	var all []store.ClaimedJob
	buf = nil
	next := int64(100)
	for range 200 {
		claim := make([]store.ClaimedJob, r.IntN(20))
		q := queues[r.IntN(len(queues))]
		for i := range claim {
			claim[i] = job(next, q, r.IntN(4), time.Duration(r.IntN(5))*time.Second)
			next++
		}
		slices.SortFunc(claim, store.ClaimOrder) // as JobClaim returns them
		buf = mergeClaimed(buf, claim, order)
		all = append(all, claim...)
		slices.SortFunc(all, order)
		if !slices.Equal(ids(buf), ids(all)) {
			t.Fatalf("after merging %v: buffer %v, want %v", ids(claim), ids(buf), ids(all))
		}
		n := r.IntN(len(buf) + 1)
		buf, all = buf[n:], all[n:]
	}
}
