// Package lifecycle is the start and stop bookkeeping of fleet's
// services, the background parts of a master and of a worker: each has
// Start, and a Stop that cancels its work and waits for it, safe before
// Start, twice and from several goroutines at once. A master or a worker
// is an ordered list of services, started in order by StartAll and
// stopped in the reverse by StopAll.
//
// It also holds Signal, the event a test waits for instead of sleeping.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Service is the lifecycle every service has.
type Service interface {
	// Name names the service in logs and in the order the tests assert.
	Name() string
	// Start starts the service's work in the background and returns once
	// it runs. ctx bounds that start and carries values; the service runs
	// until Stop, whatever becomes of ctx. A service starts once: a second
	// Start, or one after Stop, fails. A Start that fails leaves nothing
	// running.
	Start(ctx context.Context) error
	// Stop cancels the service's work, statements in flight included, and
	// returns once its goroutines have ended. It is safe before Start,
	// twice, and from several goroutines at once.
	Stop()
}

// ErrStarted and ErrStopped are what a second Start, and a Start after
// Stop, return (wrapped with the service's name).
var (
	ErrStarted = errors.New("already started")
	ErrStopped = errors.New("stopped before it started")
)

// Lifecycle is the start and stop bookkeeping a service embeds: Begin at
// Start, Halt at Stop. The zero Lifecycle is ready.
type Lifecycle struct {
	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// Begin starts the service: it returns the service's context (ctx's
// values, not its cancellation; cancelled by Halt) and end, which the
// service calls once its work has ended (at once when its start fails).
// end may be called more than once.
func (l *Lifecycle) Begin(ctx context.Context, name string) (context.Context, func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.stopped:
		return nil, nil, fmt.Errorf("%s: %w", name, ErrStopped)
	case l.started:
		return nil, nil, fmt.Errorf("%s: %w", name, ErrStarted)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	l.started, l.cancel, l.done = true, cancel, done
	var once sync.Once
	return sctx, func() { once.Do(func() { close(done) }) }, nil
}

// Halt marks the service stopped, cancels its context and waits for its
// work to end.
func (l *Lifecycle) Halt() {
	l.mu.Lock()
	l.stopped = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if done == nil {
		return // never started
	}
	cancel()
	<-done
}

// Ended is closed once the service's work has ended (nil before Start).
func (l *Lifecycle) Ended() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// StartAll starts services in order and returns how many started,
// signalling "start NAME" on sig after each; on the first failure it
// stops none of them (StopAll does, given those).
func StartAll[S Service](ctx context.Context, services []S, sig *Signal[string]) (int, error) {
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			return i, err
		}
		sig.Send("start " + s.Name())
	}
	return len(services), nil
}

// StopAll stops services in the reverse of their order, signalling
// "stop NAME" on sig after each.
func StopAll[S Service](services []S, sig *Signal[string]) {
	for i := len(services) - 1; i >= 0; i-- {
		services[i].Stop()
		sig.Send("stop " + services[i].Name())
	}
}

// TickEvery runs round every interval on ctx until ctx ends, and signals
// each round done on sig.
func TickEvery(ctx context.Context, every time.Duration, round func(context.Context), sig *Signal[struct{}]) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			round(ctx)
			sig.Send(struct{}{})
		}
	}
}

// Sequence is what StartAll and then StopAll signal for services of these
// names when every one starts: "start NAME" in order, then "stop NAME" in
// the reverse. Tests of a composition compare their signals with it.
func Sequence(names []string) []string {
	out := make([]string, 0, 2*len(names))
	for _, n := range names {
		out = append(out, "start "+n)
	}
	for _, n := range slices.Backward(names) {
		out = append(out, "stop "+n)
	}
	return out
}
