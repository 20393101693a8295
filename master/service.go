package master

import (
	"context"
	"sync"
	"time"
)

// service is the lifecycle every background part of a master has. A
// master is the ordered list of its services (Master.services): started
// in order, stopped in the reverse.
type service interface {
	// Name names the service in logs and in the order the tests assert.
	Name() string
	// Start starts the service's work in the background. It returns once
	// the service runs, after whatever the services started after it
	// need done first (the membership's first beat, the first pause state
	// and workload). ctx bounds that start and carries values; the
	// service runs until Stop, whatever becomes of ctx, so that a
	// stopping master keeps its services while its children drain. A
	// service starts once: a second Start, or one after Stop, fails. A
	// Start that fails leaves nothing running.
	Start(ctx context.Context) error
	// Stop cancels the service's work, statements in flight included,
	// does its last round (if it has one) on the master's stop budget,
	// and returns once its goroutines have ended. It is safe before
	// Start, twice, and from several goroutines at once.
	Stop()
}

// stopBudget is the time a master's services share for what they do
// once supervision has ended and the children are gone: their last
// rounds, the release of what the children held, leaving the fleet. Its
// context ends d after the first stop that starts it (or at release),
// so a frozen database cannot hold a stop for longer, however many
// services wait on it.
type stopBudget struct {
	d      time.Duration
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	timer *time.Timer
}

func newStopBudget(d time.Duration) *stopBudget {
	ctx, cancel := context.WithCancel(context.Background())
	return &stopBudget{d: d, ctx: ctx, cancel: cancel}
}

// start starts the countdown, once; later calls change nothing.
func (b *stopBudget) start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer == nil && b.ctx.Err() == nil {
		b.timer = time.AfterFunc(b.d, b.cancel)
	}
}

// context is the budget's context: it ends d after start, or at release.
func (b *stopBudget) context() context.Context { return b.ctx }

// bound returns a context with ctx's values that ends after at most d,
// and no later than the budget: the time limit of a statement that must
// run even when its service is stopping (the record of a duty done).
func (b *stopBudget) bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	stop := context.AfterFunc(b.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// release ends the budget now.
func (b *stopBudget) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.cancel()
}

// statementTimeout bounds one statement of the housekeeping and workload
// services, and of the duties' reads and claims.
const statementTimeout = 10 * time.Second
