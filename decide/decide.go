// Package decide holds fleet's pure decisions: functions of values to
// values, with no database, clock or goroutine, so that a table test
// covers each. The runtime and the operator API both call them with what
// they read.
package decide

import (
	"maps"
	"math"
	"slices"

	"github.com/fleet-go/fleet/model"
)

// LongWaits decides which queues wait long: those whose oldest ready job's
// wait (in seconds; absent: no ready job) reached their threshold (0 or
// none: off), sorted by queue, the wait rounded to the millisecond.
func LongWaits(waits map[string]float64, thresholds map[string]int) []model.LongWaitDetected {
	var out []model.LongWaitDetected
	for _, q := range slices.Sorted(maps.Keys(waits)) {
		t, w := thresholds[q], waits[q]
		if t > 0 && w >= float64(t) {
			out = append(out, model.LongWaitDetected{Queue: q, WaitSecs: math.Round(w*1000) / 1000, ThresholdSecs: t})
		}
	}
	return out
}
