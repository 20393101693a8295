package master

import (
	"context"

	"github.com/fleet-go/fleet/store"
)

// peers is what the other services read of the membership: this master's
// instance, its latest view of the fleet (on the database clock), and
// whether that view may be trusted to presume a silent member gone.
// *membership.Service is the real one; tests may give a service another.
type peers interface {
	Instance() string
	View() store.View
	Trusted() bool
}

// beater is what supervision needs of the membership: peers, and a beat
// at once when the state it publishes changed.
type beater interface {
	peers
	Kick()
}

// leaveOnBudget is the membership's Config.LeaveContext in a master: the
// membership is the first service and the last; its Stop comes after
// every other service's, once the last child has exited and housekeeping
// released what the children held, and it leaves (or lingers) on what is
// left of the stop budget, whose countdown it starts if nothing has.
func leaveOnBudget(b *stopBudget) func() context.Context {
	return func() context.Context {
		b.start()
		return b.context()
	}
}
