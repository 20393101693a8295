package fleettest

import (
	"sync"
	"time"
)

// Clock is a clock a test sets by hand, for what fleet reports and decides
// by the time: give its Now to fleet.Options.Now (or to
// store.Store.WithClock) and LongWaits, Workload, Overview and Metrics see
// the fleet as they would at the clock's time, without waiting for it. It
// stands still until the test moves it, and is safe for concurrent use.
//
// Its limits: fleet reads it only where it reports or decides by the
// time; dispatch, the workers' claims and finishes, retries and snoozes,
// and the liveness of masters and workers keep the database's clock
// (now()). A job dispatched is available from the database's now(), so
// set the clock at or after the dispatch (NewClock(time.Now()) then
// Advance) to see it ready and waiting; a clock behind the database's
// sees it as delayed. The database and the test process are assumed to
// share a clock to within a little, as on one machine. To make delayed
// jobs due on the database's clock, MakeDue is the tool.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock showing t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set sets the clock to t, forward or back.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Advance moves the clock d forward (back when d is negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
