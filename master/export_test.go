package master

import (
	"time"

	svclife "github.com/fleet-go/fleet/internal/lifecycle"
)

// What the tests of package master_test, which drive a whole master, use
// of the package's test helpers.

// Poll and PollFor are the package's one polling helper.
var (
	Poll    = poll
	PollFor = pollFor
)

// TestClock is an injected clock (Settings.Now) that moves only when told.
type TestClock = testClock

// NewTestClock returns a TestClock at at.
func NewTestClock(at time.Time) *TestClock { return newTestClock(at) }

// Signals are the test signals of a master's services.
type Signals struct {
	// StateApplied: supervision applied a pause state (one that did not
	// end it).
	StateApplied *svclife.Signal[stateSnap]
	// Rebalanced: supervision computed its allocations.
	Rebalanced *svclife.Signal[struct{}]
	// Ticked: supervision did a tick's checks.
	Ticked *svclife.Signal[struct{}]
	// Event: supervision handled a child's event.
	Event *svclife.Signal[struct{}]
	// HousekeepingRound, DutiesRound, PeriodicRound: a round of that
	// service done (the periodic one says how long it waits next).
	HousekeepingRound *svclife.Signal[struct{}]
	DutiesRound       *svclife.Signal[struct{}]
	PeriodicRound     *svclife.Signal[time.Duration]
}

// InitSignals initialises the test signals of m's services and returns
// them; call it before Run.
func InitSignals(m *Master) *Signals {
	s := &Signals{
		StateApplied: &m.supervision.sig.applied,
		Rebalanced:   &m.supervision.sig.rebalanced,
		Ticked:       &m.supervision.sig.ticked,
		Event:        &m.supervision.sig.event,
	}
	for _, svc := range m.services {
		switch v := svc.(type) {
		case *housekeeping:
			s.HousekeepingRound = &v.sig.round
		case *duties:
			s.DutiesRound = &v.sig.round
		case *periodicSvc:
			s.PeriodicRound = &v.sig.round
		}
	}
	for _, sig := range []interface{ Init() }{s.StateApplied, s.Rebalanced, s.Ticked, s.Event, s.HousekeepingRound, s.DutiesRound, s.PeriodicRound} {
		sig.Init()
	}
	return s
}
