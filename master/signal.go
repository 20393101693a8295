package master

import svclife "github.com/fleet-go/fleet/internal/lifecycle"

// testSignal is an event a test can wait for (see lifecycle.Signal,
// which it is): a service signals it each time the event happens (a round
// done, a state applied), and a test that initialised it before the
// service started receives them in order. Uninitialised, as outside
// tests, a signal costs a nil check; signalling never blocks.
type testSignal[T any] struct{ svclife.Signal[T] }

// init makes the signal deliver events; call it before the service that
// signals it starts.
func (s *testSignal[T]) init() { s.Init() }

// signal records one event.
func (s *testSignal[T]) signal(v T) { s.shared().Send(v) }

// shared is the signal itself, nil for a nil one.
func (s *testSignal[T]) shared() *svclife.Signal[T] {
	if s == nil {
		return nil
	}
	return &s.Signal
}
