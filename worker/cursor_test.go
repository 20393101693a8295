package worker

import (
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet/store"
)

func TestClaimCursor(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	job := func(prio int, at time.Duration, id int64) store.ClaimedJob {
		return store.ClaimedJob{ID: id, Priority: prio, AvailableAt: t0.Add(-time.Hour + at)}
	}
	var c claimCursor
	if m := c.after(t0); m != nil {
		t.Fatalf("first claim reads past %v, want the head", m)
	}
	// A claim from the head that took 10 ms: the next one from the head is
	// due 200 ms after it began.
	c.claimed(t0, 10*time.Millisecond, nil, []store.ClaimedJob{job(0, 1, 1), job(0, 2, 2), job(5, 1, 7)})
	want := []store.ClaimMark{store.MarkOf(job(0, 2, 2)), store.MarkOf(job(5, 1, 7))}
	if m := c.after(t0.Add(199 * time.Millisecond)); !slices.Equal(m, want) {
		t.Fatalf("marks %v, want %v (the last job of each priority, in priority order)", m, want)
	}
	if m := c.after(t0.Add(200 * time.Millisecond)); m != nil {
		t.Fatalf("200 ms after a claim from the head of 10 ms, marks %v; want the head", m)
	}
	// A claim from marks moves them to its last job; the others stay.
	marks := c.after(t0.Add(50 * time.Millisecond))
	c.claimed(t0.Add(50*time.Millisecond), time.Millisecond, marks, []store.ClaimedJob{job(0, 3, 3), job(0, 4, 4)})
	want = []store.ClaimMark{store.MarkOf(job(0, 4, 4)), store.MarkOf(job(5, 1, 7))}
	if m := c.after(t0.Add(60 * time.Millisecond)); !slices.Equal(m, want) {
		t.Fatalf("marks %v, want %v", m, want)
	}
	// A claim from the head that finds a job behind a mark moves it back;
	// a dear one (800 ms) spaces the next ones out, to 10 s at most.
	c.claimed(t0.Add(time.Second), 800*time.Millisecond, nil, []store.ClaimedJob{job(0, 0, 9)})
	want = []store.ClaimMark{store.MarkOf(job(0, 0, 9)), store.MarkOf(job(5, 1, 7))}
	if m := c.after(t0.Add(time.Second + 10*time.Second - time.Millisecond)); !slices.Equal(m, want) {
		t.Fatalf("marks %v, want %v", m, want)
	}
	if m := c.after(t0.Add(11 * time.Second)); m != nil {
		t.Fatalf("10 s after a claim from the head, marks %v; want the head", m)
	}
	// A claim from the head that failed still counts as one.
	c.claimed(t0.Add(11*time.Second), 20*time.Millisecond, nil, nil)
	if m := c.after(t0.Add(11*time.Second + 399*time.Millisecond)); !slices.Equal(m, want) {
		t.Fatalf("after a failed claim from the head, marks %v, want %v", m, want)
	}
}
