package master

import (
	"context"
	"log/slog"
	"time"

	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/internal/ratelog"
	"github.com/fleet-go/fleet/store"
)

// heldCheck is how often a master looks for a session holding back the
// cleanup of dead rows, unless Settings.HeldCheck says otherwise.
const heldCheck = 10 * time.Second

// heldListed is how many such sessions one look reads: the oldest is
// named, the others counted.
const heldListed = 10

// heldWatch is the service that looks, every HeldCheck, for sessions of
// the database that have held back the cleanup of dead rows for at least
// HeldWarn (see store.CleanupHolders), and warns, at most once every
// HeldWarnEvery, naming the oldest: its pid, how long it has held, its
// application_name, its state and the start of its statement, literals
// masked. While one does, every row version the fleet's claims, finishes
// and releases leave behind stays in fleet's tables and indexes (and in
// every other table of the database): statements that read them slow
// down, and vacuums cannot help. When none is left after a warning it
// says so, once. It needs no other service, and none needs it.
type heldWatch struct {
	st   *store.Store
	log  *slog.Logger
	logs ratelog.Log // failed looks
	now  func() time.Time

	after, every, warnEvery time.Duration

	// Its goroutine's own: when it last warned (zero: not in this episode).
	warnedAt time.Time

	lc  svclife.Lifecycle
	sig struct {
		looked svclife.Signal[[]store.CleanupHolder] // a look done, and what it found
	}
}

func newHeldWatch(st *store.Store, set Settings, log *slog.Logger) *heldWatch {
	return &heldWatch{st: st, log: log, now: set.Now, after: set.HeldWarn, every: set.HeldCheck, warnEvery: set.HeldWarnEvery}
}

func (w *heldWatch) Name() string { return "held transactions" }

// Start looks at once, then every HeldCheck, on its own goroutine until
// Stop.
func (w *heldWatch) Start(ctx context.Context) error {
	sctx, end, err := w.lc.Begin(ctx, w.Name())
	if err != nil {
		return err
	}
	go func() {
		defer end()
		w.look(sctx)
		svclife.TickEvery(sctx, w.every, w.look, nil)
	}()
	return nil
}

// Stop cancels the look in flight and waits.
func (w *heldWatch) Stop() { w.lc.Halt() }

// look reads the sessions holding back cleanup past the threshold and
// warns when due.
func (w *heldWatch) look(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, statementTimeout)
	hs, err := w.st.CleanupHolders(lctx, w.after, heldListed)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.logs.Fail(w.log, "held", "looking for transactions that hold back the cleanup of dead rows failed", "err", err)
		}
		return
	}
	w.logs.OK(w.log, "held", "looking for transactions that hold back the cleanup of dead rows works again")
	switch now := w.now(); {
	case len(hs) > 0 && (w.warnedAt.IsZero() || now.Sub(w.warnedAt) >= w.warnEvery):
		h := hs[0]
		w.log.Warn("a transaction has held back the cleanup of dead rows past fleet.held_warn_secs: every row version fleet's jobs leave behind stays in its tables and indexes until it ends",
			"pid", h.PID, "age", h.Age.Round(time.Second).String(), "application_name", h.ApplicationName, "state", h.State,
			"query", h.Query, "others", len(hs)-1, "held_warn", w.after.String())
		w.warnedAt = now
	case len(hs) == 0 && !w.warnedAt.IsZero():
		w.log.Info("no transaction holds back the cleanup of dead rows any more", "held_warn", w.after.String())
		w.warnedAt = time.Time{}
	}
	w.sig.looked.Send(hs)
}
