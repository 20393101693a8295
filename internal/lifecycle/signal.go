package lifecycle

import "time"

// Signal is an event a test can wait for: a service sends it each time
// the event happens (a round done, a state applied), and a test that
// initialised it before the service started receives them in order from
// C. Uninitialised, as outside tests, or nil, a signal costs a nil check.
// Sending never blocks: past SignalBuffer unread events the newest are
// dropped, so a test that waits for the next events first drains the
// ones it does not care about.
type Signal[T any] struct {
	ch chan T
	// at, when set, is called with each event on the sender's goroutine
	// (see At).
	at func(T)
}

// SignalBuffer is how many unread events a signal keeps.
const SignalBuffer = 256

// Init makes the signal deliver events; call it before the service that
// sends it starts.
func (s *Signal[T]) Init() { s.ch = make(chan T, SignalBuffer) }

// At makes Send call f with each event, on the sender's goroutine, before
// the event is queued: what f records is in the order of the service's
// own steps, however late the test reads C. Call it after Init and before
// the service starts; f must not block.
func (s *Signal[T]) At(f func(T)) { s.at = f }

// Send records one event.
func (s *Signal[T]) Send(v T) {
	if s == nil || s.ch == nil {
		return
	}
	if s.at != nil {
		s.at(v)
	}
	select {
	case s.ch <- v:
	default:
	}
}

// C is the channel the events arrive on (nil before Init).
func (s *Signal[T]) C() <-chan T {
	if s == nil {
		return nil
	}
	return s.ch
}

// TB is what the waits below need of a test (testing.TB has it), so that
// the package does not import testing.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// SignalWait bounds a wait for one event.
const SignalWait = 15 * time.Second

// Wait returns the next event, failing the test when none comes within
// SignalWait.
func (s *Signal[T]) Wait(t TB) T {
	t.Helper()
	if s.C() == nil {
		t.Fatalf("waiting on a test signal that was not initialised")
	}
	timer := time.NewTimer(SignalWait)
	defer timer.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-timer.C:
		t.Fatalf("no test signal within %s", SignalWait)
		panic("unreachable")
	}
}

// Drain forgets the events not taken yet.
func (s *Signal[T]) Drain() {
	for {
		select {
		case <-s.C():
		default:
			return
		}
	}
}

// WaitFresh forgets the events so far and waits for n more: n rounds that
// all began after the call's start but for the first, which may have been
// under way.
func (s *Signal[T]) WaitFresh(t TB, n int) []T {
	t.Helper()
	s.Drain()
	out := make([]T, 0, n)
	for range n {
		out = append(out, s.Wait(t))
	}
	return out
}

// None fails the test if an event is waiting: for a round run by the test
// itself, on its own goroutine, this proves that the round did not do it.
func (s *Signal[T]) None(t TB, what string) {
	t.Helper()
	select {
	case v := <-s.C():
		t.Fatalf("%s: got %v", what, v)
	default:
	}
}
