package fleettest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/fleettest"
)

// A Clock stands still until moved, and moves as told from any goroutine.
func TestClockMovesOnlyWhenTold(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	c := fleettest.NewClock(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("a new clock shows %s, want %s", got, t0)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if want := t0.Add(800 * time.Second); !c.Now().Equal(want) {
		t.Fatalf("after 800 advances of a second the clock shows %s, want %s", c.Now(), want)
	}
	c.Set(t0.Add(-time.Hour))
	if want := t0.Add(-time.Hour); !c.Now().Equal(want) {
		t.Fatalf("set back, the clock shows %s, want %s", c.Now(), want)
	}
}
