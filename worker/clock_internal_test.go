package worker

import (
	"testing"
	"time"

	"github.com/fleet-go/fleet/store"
)

// An attempt's times, taken from the worker's own clock, are written on
// the database clock: shifted by the offset its claim measured, so that a
// host whose clock is behind the database's never records an attempt
// that started before its reservation.
func TestOutcomeTimesAreOnTheDatabaseClock(t *testing.T) {
	reserved := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	local := reserved.Add(-10 * time.Minute).Add(3 * time.Millisecond) // this host runs 10 minutes behind
	j := store.ClaimedJob{ID: 1, Token: 2, ReservedAt: reserved, ClockOffset: 10 * time.Minute}
	o := outcome(j, local, local.Add(time.Second), store.OutcomeCompleted, "completed", "")
	if !o.StartedAt.Equal(reserved.Add(3*time.Millisecond)) || !o.FinishedAt.Equal(reserved.Add(time.Second+3*time.Millisecond)) {
		t.Fatalf("started %s, finished %s; want 3 ms and 1.003 s after the reservation at %s", o.StartedAt, o.FinishedAt, reserved)
	}
	if o.RuntimeMs != 1000 {
		t.Errorf("runtime %v ms, want 1000", o.RuntimeMs)
	}
}
