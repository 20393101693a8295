package process

import "testing"

func TestWorkerGCUnlessGOGCIsSet(t *testing.T) {
	if pct, ok := workerGC([]string{"HOME=/x"}); !ok || pct != workerGCPercent {
		t.Errorf("without GOGC: %d, %v; want %d, true", pct, ok, workerGCPercent)
	}
	if pct, ok := workerGC([]string{"GOGC=50"}); ok {
		t.Errorf("with GOGC=50 the worker sets %d; want GOGC left to the runtime", pct)
	}
}

// The collector's target is 400 for a small live heap, comes down as the
// live heap passes a quarter of the headroom so that the heap grows by the
// headroom past it, and stays at Go's default of 100 from the headroom on.
func TestWorkerGCPercentFor(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{{0, 400}, {2 * mb, 400}, {8 * mb, 400}, {16 * mb, 200}, {24 * mb, 133}, {32 * mb, 100}, {512 * mb, 100}} {
		if got := workerGCPercentFor(c.live); got != c.want {
			t.Errorf("live heap %d MB: GC percent %d, want %d", c.live/mb, got, c.want)
		}
	}
}
