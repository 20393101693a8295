package master

import (
	"time"

	"github.com/fleet-go/fleet/internal/backoff"
)

// restarts tracks the failures of one process group: a crash or a failed
// spawn delays the next start by a delay that starts at base and doubles up
// to max, plus up to a quarter of it at random; a healthy run resets it.
// It holds no clock: callers pass now.
type restarts struct {
	delay  backoff.Exponential
	next   time.Time   // no start before this
	recent []time.Time // failures within the last minute
}

func newRestarts(base, max time.Duration) *restarts {
	return &restarts{delay: backoff.Exponential{Base: base, Max: max}}
}

// healthyRun is how long a process must live for its crash not to count
// as a crash loop.
const healthyRun = time.Minute

// crashLoopWindow and crashLoopFailures say when failures become an error:
// five within a minute.
const (
	crashLoopWindow   = time.Minute
	crashLoopFailures = 5
)

// fail records a failure at now of a process that lived for lived, and
// reports whether the group is now crash-looping (five failures within a
// minute).
func (r *restarts) fail(now time.Time, lived time.Duration) bool {
	if lived >= healthyRun {
		r.delay.Reset()
	}
	d := r.delay.Next()
	// Up to a quarter more, at random: the groups of many masters that lost
	// something together (a deploy, a database) do not restart in step.
	r.next = now.Add(backoff.Between(d, d+d/4))
	kept := r.recent[:0]
	for _, t := range r.recent {
		if now.Sub(t) < crashLoopWindow {
			kept = append(kept, t)
		}
	}
	r.recent = append(kept, now)
	return len(r.recent) >= crashLoopFailures
}

// retryIn is the delay of the last failure, without its random part.
func (r *restarts) retryIn() time.Duration { return r.delay.Current() }

// ok records a healthy exit: the next failure starts from base again.
func (r *restarts) ok() {
	r.delay.Reset()
	r.next = time.Time{}
}

// ready reports whether the group may start a process at now.
func (r *restarts) ready(now time.Time) bool { return !now.Before(r.next) }
