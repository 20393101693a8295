package worker

import (
	"context"
	"sync/atomic"

	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/store"
)

// Completing: the last of the hot path's three roles, after fetching (the
// claimer) and executing (see execute.go).

// completer takes the outcomes of finished attempts and writes them; the
// worker's is the writer (writer.go), which writes them in batches on its
// own goroutine. It is a service, started first and stopped last, so that
// every outcome the claimer hands it while the worker runs has somewhere
// to go.
type completer interface {
	lifecycle.Service
	// add takes one outcome to write; it never waits for a write.
	add(o store.JobOutcome)
	// Unsaved is how many outcomes were added and are not written yet: the
	// claimer claims nothing while it reaches Config.MaxUnsaved
	// (backpressure).
	Unsaved() int
	// Stalled is how many outcomes wait while writing them fails (the
	// database is away, or has no connection to give): 0 while writes
	// succeed. The heartbeat tells the master, which then does not take
	// the jobs' age for a stuck handler (see spawner.Report.Unwritten).
	Stalled() int
	// drain waits until every outcome added so far is written or ctx ends.
	drain(ctx context.Context) error
	// holding adds to held the leases of the outcomes not written yet: the
	// worker still holds their jobs (see reconcile).
	holding(held map[store.Lease]bool)
}

var _ completer = (*writer)(nil)

// nudges are how the worker's services wake the claimer's loop: built
// before any of them (see assemble), so that each is given them when it
// is built. The listener and the writer poke it, the listener and the
// writer ask for a reconcile, and the listener and the cancel poller hand
// it cancel requests. A statement refused a connection tells the
// listener to give up its own (see listener.yield).
type nudges struct {
	wake chan struct{}
	// resync asks for a reconcile even while nothing is held (see
	// reconcile.go).
	resync atomic.Bool
	// cancels carries cancel requests from the listener and the poller to
	// the loop.
	cancels chan store.CancelNotice
	// refused carries, to the listener, that a statement of the worker was
	// refused a connection for want of a free slot on the server.
	refused chan struct{}
}

func newNudges() *nudges {
	return &nudges{wake: make(chan struct{}, 1), cancels: make(chan store.CancelNotice, cancelBacklog), refused: make(chan struct{}, 1)}
}

// poke wakes the loop for a claim, never blocking.
func (n *nudges) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// resyncSoon asks for a reconcile at the next reconcile tick, even if the
// worker holds nothing by then: a statement failed (the database may have
// failed over), or the notification connection came back.
func (n *nudges) resyncSoon() { n.resync.Store(true) }

// failed is resyncSoon for a statement that failed with err; when the
// server refused it a connection (store.ConnectionRefused) it also tells
// the listener, never blocking.
func (n *nudges) failed(err error) {
	n.resyncSoon()
	if store.ConnectionRefused(err) {
		select {
		case n.refused <- struct{}{}:
		default:
		}
	}
}

// noticeCancel hands a notified cancel request to the loop, never
// blocking the listener.
func (n *nudges) noticeCancel(cn store.CancelNotice) {
	select {
	case n.cancels <- cn:
	default:
	}
}
