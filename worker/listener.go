package worker

import (
	"context"
	"log/slog"
	"slices"
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

	lc  lifecycle.Lifecycle
	sig struct {
		connected lifecycle.Signal[struct{}] // the connection listens
		lost      lifecycle.Signal[error]    // the connection dropped
	}
}

// Backoff of the listener's reconnects.
const (
	listenRetryBase = 100 * time.Millisecond
	listenRetryMax  = 10 * time.Second
)

func newListener(st *store.Store, queues []string, log *slog.Logger, wake, resync func(), cancel func(store.CancelNotice)) *listener {
	return &listener{st: st, queues: queues, log: log, wake: wake, resync: resync, cancel: cancel}
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
		err := l.st.ListenCancels(ctx, func() {
			retry.Reset()
			if connected {
				l.resync()
			}
			connected = true
			l.wake()
			l.sig.connected.Send(struct{}{})
		}, func(q string) {
			if slices.Contains(l.queues, q) {
				l.wake()
			}
		}, l.cancel)
		if ctx.Err() != nil {
			return
		}
		l.sig.lost.Send(err)
		d := retry.Next()
		l.log.Debug("notification connection lost; polling until it is back", "err", err, "retry_in", d)
		if backoff.Sleep(ctx, d) != nil {
			return
		}
	}
}
