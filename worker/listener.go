package worker

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/internal/backoff"
	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/store"
)

// listener is the service that holds the worker's notification
// connection: it wakes the claimer when a job is dispatched to one of the
// worker's queues, and hands it cancel requests (see cancel.go). When the
// connection drops it reconnects with backoff; the claimer's polls cover
// the gap. A store with nothing to listen on (store.WithoutListen: a
// transaction pooler and no direct connection) leaves it to the polls:
// the listener then starts and does nothing.
//
// The notification connection is the first a worker gives up: when a
// statement of the worker is refused a connection for want of a free slot
// on the server (refused), the listener closes its own, so that writing
// finished jobs and claiming get that slot, and waits listenYieldWait
// before it tries again (the claimer's polls wake the worker meanwhile).
// On a server with room for one connection of the worker, that one does
// the work, never the wake-ups.
type listener struct {
	st     *store.Store
	queues []string
	log    *slog.Logger
	// wake wakes the claimer: a job was dispatched to one of the queues,
	// or the connection is up (anything dispatched while it was not is
	// caught up with).
	wake func()
	// resync asks the claimer for a reconcile: the connection came back
	// after a drop, and the database may have failed over.
	resync func()
	// cancel hands a cancel request to the claimer; it never blocks.
	cancel func(store.CancelNotice)
	// refused says that a statement of the worker was refused a
	// connection (see nudges.failed).
	refused <-chan struct{}

	lc  lifecycle.Lifecycle
	sig struct {
		connected lifecycle.Signal[struct{}] // the connection listens
		lost      lifecycle.Signal[error]    // the connection dropped
		yielded   lifecycle.Signal[struct{}] // the connection was given up for the pool
	}
	// yieldWait is listenYieldWait, shorter in tests.
	yieldWait time.Duration
}

// Backoff of the listener's reconnects.
const (
	listenRetryBase = 100 * time.Millisecond
	listenRetryMax  = 10 * time.Second
	// listenYieldWait is how long the listener stays off after giving its
	// connection up to the pool: long enough for the pool's next attempt to
	// take the slot.
	listenYieldWait = 10 * time.Second
)

func newListener(st *store.Store, queues []string, log *slog.Logger, wake, resync func(), cancel func(store.CancelNotice),
	refused <-chan struct{}) *listener {
	return &listener{st: st, queues: queues, log: log, wake: wake, resync: resync, cancel: cancel, refused: refused,
		yieldWait: listenYieldWait}
}

func (l *listener) Name() string { return "listener" }

// Start listens on its own goroutine until Stop.
func (l *listener) Start(ctx context.Context) error {
	sctx, end, err := l.lc.Begin(ctx, l.Name())
	if err != nil {
		return err
	}
	go func() {
		defer end()
		if l.st.Listens() {
			l.listen(sctx)
		}
	}()
	return nil
}

// Stop closes the connection and waits.
func (l *listener) Stop() { l.lc.Halt() }

// listen listens, and reconnects after each drop, until ctx ends.
func (l *listener) listen(ctx context.Context) {
	retry := backoff.Exponential{Base: listenRetryBase, Max: listenRetryMax}
	for connected := false; ; {
		yielded, err := l.session(ctx, func() {
			retry.Reset()
			if connected {
				l.resync()
			}
			connected = true
			l.wake()
			l.sig.connected.Send(struct{}{})
		})
		if ctx.Err() != nil {
			return
		}
		d := retry.Next()
		if yielded {
			d = l.yieldWait
			l.log.Warn("a statement of this worker was refused a connection (the server has no slot free): "+
				"the notification connection gives its slot up, and wake-ups are polled until it is back", "retry_in", d)
			l.sig.yielded.Send(struct{}{})
		} else {
			l.sig.lost.Send(err)
			l.log.Debug("notification connection lost; polling until it is back", "err", err, "retry_in", d)
		}
		if backoff.Sleep(ctx, d) != nil {
			return
		}
	}
}

// session holds one notification connection until it drops or ctx ends,
// or, once it listens, until a statement of the worker is refused a
// connection: then it closes it and reports yielded.
func (l *listener) session(ctx context.Context, onListening func()) (yielded bool, err error) {
	sctx, drop := context.WithCancel(ctx)
	defer drop()
	var up, gaveUp atomic.Bool
	watched := make(chan struct{})
	go func() { // ends with the session: drop runs at the latest as it returns
		defer close(watched)
		for {
			select {
			case <-sctx.Done():
				return
			case <-l.refused:
				if up.Load() {
					gaveUp.Store(true)
					drop()
					return
				}
			}
		}
	}()
	err = l.st.ListenCancels(sctx, func() {
		up.Store(true)
		onListening()
	}, func(q string) {
		if slices.Contains(l.queues, q) {
			l.wake()
		}
	}, l.cancel)
	drop()
	<-watched
	return gaveUp.Load() && ctx.Err() == nil, err
}
