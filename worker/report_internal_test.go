package worker

import (
	"math"
	"testing"

	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
)

// Prefetch reports name at most maxReportIDs jobs a line, so that a line
// of the largest ids stays under what a master reads (a longer one it
// drops whole): every waiting job is named once, and every one that leaves
// once again.
func TestPrefetchReportsFitTheLineLimit(t *testing.T) {
	var reps []spawner.Report
	c := &claimer{cfg: Config{ReportPrefetch: true, Reports: func(r spawner.Report) { reps = append(reps, r) }}}
	s := &loopState{}
	const n = 2*maxReportIDs + 500
	for i := range n {
		s.buffer = append(s.buffer, buffered{ClaimedJob: store.ClaimedJob{ID: math.MaxInt64 - int64(i)}})
	}
	c.tellPrefetched(s, 0)
	c.tellPrefetched(s, 0) // nothing new to tell
	c.tellDequeued(s.buffer)
	if len(reps) != 6 {
		t.Fatalf("%d reports, want 3 of prefetched jobs and 3 of dequeued ones", len(reps))
	}
	seen := map[int64]int{}
	for i, r := range reps {
		ids := r.Prefetched
		if i >= 3 {
			ids = r.Dequeued
		}
		if len(ids) > maxReportIDs || len(ids) == 0 {
			t.Errorf("report %d names %d jobs", i, len(ids))
		}
		if line := spawner.FormatReport(r); len(line) >= spawner.MaxLineLength/2 {
			t.Errorf("report %d is %d bytes, want well under %d", i, len(line), spawner.MaxLineLength)
		}
		for _, id := range ids {
			seen[id]++
		}
	}
	if len(seen) != n {
		t.Errorf("%d jobs named, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 2 {
			t.Fatalf("job %d named %d times, want twice (waiting, then leaving)", id, k)
		}
	}
}
