package master

// testSignal is an event a test can wait for: a service signals it each
// time the event happens (a round done, a state applied), and a test that
// initialised it before the service started receives them in order.
// Uninitialised, as outside tests, a signal costs a nil check. Signalling
// never blocks: past testSignalBuffer unread events the newest are
// dropped, so a test that waits for the next events first drains the
// ones it does not care about (see the test helpers).
type testSignal[T any] struct {
	ch chan T
}

// testSignalBuffer is how many unread events a signal keeps.
const testSignalBuffer = 256

// init makes the signal deliver events; call it before the service that
// signals it starts.
func (s *testSignal[T]) init() { s.ch = make(chan T, testSignalBuffer) }

// signal records one event.
func (s *testSignal[T]) signal(v T) {
	if s == nil || s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}
