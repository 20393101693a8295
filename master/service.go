package master

import (
	"context"
	"sync"
	"time"

	svclife "github.com/fleet-go/fleet/internal/lifecycle"
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

// errStarted and errStopped are what a second Start, and a Start after
// Stop, return.
var (
	errStarted = svclife.ErrStarted
	errStopped = svclife.ErrStopped
)

// lifecycle is the start and stop bookkeeping a service embeds: begin at
// Start, halt at Stop (see lifecycle.Lifecycle, which it is).
type lifecycle struct{ l svclife.Lifecycle }

// begin starts the service: it returns the service's context (ctx's
// values, not its cancellation; cancelled by halt) and end, which the
// service calls once its work has ended (at once when its start fails).
func (l *lifecycle) begin(ctx context.Context, name string) (context.Context, func(), error) {
	return l.l.Begin(ctx, name)
}

// halt marks the service stopped, cancels its context and waits for its
// work to end.
func (l *lifecycle) halt() { l.l.Halt() }

// ended is closed once the service's work has ended (nil before Start).
func (l *lifecycle) ended() <-chan struct{} { return l.l.Ended() }

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

// startAll starts services in order and returns how many started; on the
// first failure it stops none of them (stopAll does, given those).
func startAll(ctx context.Context, services []service, sig *testSignal[string]) (int, error) {
	return svclife.StartAll(ctx, services, sig.shared())
}

// stopAll stops services in the reverse of their order.
func stopAll(services []service, sig *testSignal[string]) { svclife.StopAll(services, sig.shared()) }

// tickEvery runs round every interval on ctx until ctx ends, and signals
// each round done on sig.
func tickEvery(ctx context.Context, every time.Duration, round func(context.Context), sig *testSignal[struct{}]) {
	svclife.TickEvery(ctx, every, round, sig.shared())
}

// statementTimeout bounds one statement of the housekeeping and workload
// services, and of the duties' reads and claims.
const statementTimeout = 10 * time.Second
