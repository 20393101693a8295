package membership

import "sync"

// beatBuckets are the upper bounds, in seconds, of the beat-duration
// histogram.
var beatBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// histogram is a small fixed-bucket histogram safe for concurrent use.
type histogram struct {
	mu     sync.Mutex
	counts []uint64 // per bucket, not cumulative
	count  uint64
	sum    float64
}

func newHistogram() *histogram { return &histogram{counts: make([]uint64, len(beatBuckets))} }

func (h *histogram) observe(v float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count++
	h.sum += v
	for i, b := range beatBuckets {
		if v <= b {
			h.counts[i]++
			return
		}
	}
}

// snapshot returns cumulative counts per upper bound, as Prometheus wants.
func (h *histogram) snapshot() (map[float64]uint64, uint64, float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[float64]uint64, len(beatBuckets))
	var acc uint64
	for i, b := range beatBuckets {
		acc += h.counts[i]
		out[b] = acc
	}
	return out, h.count, h.sum
}
