package worker

import "testing"

// A size halves at every timeout, down to one, and doubles back after
// growAfter statements in a row pass at it, until it reaches its ceiling
// and limits nothing again.
func TestBatchSizeShrinksAndGrowsBack(t *testing.T) {
	t.Parallel()
	b := batchSize{ceiling: 1000}
	if got := b.limit(5000); got != 1000 || b.shrunk() {
		t.Fatalf("a fresh size limits 5000 to %d (shrunk %v), want its ceiling 1000", got, b.shrunk())
	}
	if got := b.limit(300); got != 300 {
		t.Fatalf("a fresh size limits 300 to %d", got)
	}
	for _, c := range []struct{ n, want int }{{1000, 500}, {500, 250}, {250, 125}, {125, 62}, {3, 1}, {1, 1}} {
		if got := b.timedOut(c.n); got != c.want || b.limit(1000) != c.want {
			t.Fatalf("a timeout of %d: size %d (limit %d), want %d", c.n, got, b.limit(1000), c.want)
		}
	}
	// Statements smaller than the size do not grow it.
	b.timedOut(500) // size 250
	for range 5 {
		if b.ok(100) {
			t.Fatal("restored by small statements")
		}
	}
	if b.limit(1000) != 250 {
		t.Fatalf("size %d after small statements, want 250", b.limit(1000))
	}
	var sizes []int
	restored := false
	for i := 0; i < 20 && !restored; i++ {
		restored = b.ok(b.limit(1000))
		sizes = append(sizes, b.limit(1000))
	}
	want := []int{250, 500, 500, 1000}
	if !restored || len(sizes) != len(want) {
		t.Fatalf("growing back: sizes %v (restored %v), want %v", sizes, restored, want)
	}
	for i := range want {
		if sizes[i] != want[i] {
			t.Fatalf("growing back: sizes %v, want %v", sizes, want)
		}
	}
	if b.shrunk() {
		t.Fatal("still shrunk once restored")
	}
	// A timeout in the middle of growing starts the count again.
	b.timedOut(8) // 4
	b.ok(4)
	b.timedOut(4) // 2
	b.ok(2)
	if b.limit(1000) != 2 {
		t.Fatalf("size %d, want 2: one pass does not grow it", b.limit(1000))
	}
}

// Without a ceiling, only a timeout bounds the caller's own limit.
func TestBatchSizeWithoutCeiling(t *testing.T) {
	t.Parallel()
	var b batchSize
	if b.limit(77) != 77 {
		t.Fatal("the zero size limits")
	}
	b.timedOut(77)
	if b.limit(77) != 38 || b.limit(10) != 10 {
		t.Fatalf("shrunk: %d, %d", b.limit(77), b.limit(10))
	}
}
