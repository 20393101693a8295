package worker

import (
	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/spawner"
)

// What the tests of package worker_test, which drive a whole worker, use
// of the services' test signals.

// Poll is the package's one polling helper (see poll).
var Poll = poll

// Signals are the test signals of a worker's services.
type Signals struct {
	// Lifecycle: "start NAME", "stop NAME", in Run's order.
	Lifecycle *lifecycle.Signal[string]
	// Stopping: the claimer began the stop, and why.
	Stopping *lifecycle.Signal[spawner.ExitReason]
	// Polled: the claimer's poll timer fired and was handled (the probe
	// or claim it asks for follows).
	Polled *lifecycle.Signal[struct{}]
	// Claimed: a claim's jobs joined the prefetch buffer (how many, never
	// 0).
	Claimed *lifecycle.Signal[int]
	// ClaimSplit: a claim of that many jobs timed out on the server, and
	// the claim size shrank.
	ClaimSplit *lifecycle.Signal[int]
	// Started: the claimer started a job (its id), in the order it started
	// them; handlers may run in another. A signal keeps SignalBuffer
	// unread events, so a test that reads them once the worker is done
	// runs fewer jobs than that.
	Started *lifecycle.Signal[int64]
	// GaveBack: that many prefetched jobs waited Config.PrefetchHold for a
	// slot and were given back.
	GaveBack *lifecycle.Signal[int]
	// Listening: the listener's connection listens.
	Listening *lifecycle.Signal[struct{}]
	// Vacuumed: the vacuum handled a tick, true when it asked the
	// database (its first look at start does).
	Vacuumed *lifecycle.Signal[bool]
}

// WakePending reports whether a wake (a notification, the listener's
// connect) waits for the claimer's loop to take it.
func WakePending(w *Worker) bool { return len(w.claimer.wake) > 0 }

// InitSignals initialises the test signals of w's services and returns
// them; call it before Run.
func InitSignals(w *Worker) *Signals {
	s := &Signals{
		Lifecycle:  &w.sig.lifecycle,
		Stopping:   &w.claimer.sig.stopping,
		Polled:     &w.claimer.sig.polled,
		Claimed:    &w.claimer.sig.claimed,
		ClaimSplit: &w.claimer.sig.split,
		Started:    &w.claimer.sig.started,
		GaveBack:   &w.claimer.sig.gaveBack,
		Listening:  &w.listener.sig.connected,
		Vacuumed:   &w.vacuum.sig.round,
	}
	s.Lifecycle.Init()
	s.Stopping.Init()
	s.Polled.Init()
	s.Claimed.Init()
	s.ClaimSplit.Init()
	s.Started.Init()
	s.GaveBack.Init()
	s.Listening.Init()
	s.Vacuumed.Init()
	return s
}
