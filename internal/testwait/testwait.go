// Package testwait is how fleet's own tests wait for what no test signal
// tells them (rows another process wrote, a process's state): Eventually
// polls a condition under a bound, Within reports whether it held in
// time. It also has Clock, the injected clock the services' tests move by
// hand. It imports nothing of fleet's, so that every package's tests,
// internal ones included, can use it.
package testwait

import (
	"sync"
	"time"
)

// Every is the polling interval of Eventually and Within.
const Every = 10 * time.Millisecond

// Slack is how many times slower than an idle machine a test expects a
// busy one to be (the whole suite at once on two cores, or other work
// beside it). A test's deadline is Slack times what an idle machine needs:
// it only catches a hang, and a passing test waits no longer for it.
const Slack = 4

// Hang is the deadline of a wait that an idle machine ends at once or in
// seconds (a Stop, a statement past a lock it may not wait for): Slack
// times 10 s. A test logs the time such a wait took and fails only past
// Hang; how fast it is belongs to the benchmarks.
const Hang = Slack * 10 * time.Second

// TB is the part of testing.TB that Eventually uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Eventually waits until cond holds, checking every Every, and fails the
// test if it does not within the given time.
func Eventually(t TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(within, cond) {
		t.Fatalf("not within %s: %s", within, what)
	}
}

// Within reports whether cond holds within d, checking every Every.
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Every)
	}
	return true
}

// Clock is an injected clock that moves only when told; it is safe for
// concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock showing at.
func NewClock(at time.Time) *Clock { return &Clock{now: at} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
