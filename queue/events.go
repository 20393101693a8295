package queue

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// EventKind says what became of a job's attempt.
type EventKind string

// The kinds of event.
const (
	// EventCompleted: the attempt succeeded and the job is done.
	EventCompleted EventKind = "completed"
	// EventRetried: the attempt failed and the job will run again after
	// its backoff (Event.RetryIn).
	EventRetried EventKind = "retried"
	// EventFailed: the attempt failed and the job's tries are spent; it
	// moved to the failed jobs.
	EventFailed EventKind = "failed"
	// EventCancelled: the job was cancelled.
	EventCancelled EventKind = "cancelled"
	// EventSnoozed: the handler snoozed the job, which runs again later
	// without spending a try.
	EventSnoozed EventKind = "snoozed"
)

// Event is one attempt's outcome, as a worker wrote it to the database.
type Event struct {
	Kind EventKind
	// JobID, Name, Queue and Attempt are the job's and the attempt's.
	JobID   int64
	Name    string
	Queue   string
	Attempt int
	// MaxTries is the most attempts the job gets.
	MaxTries int
	// Error is the attempt's error text (empty for a completed one), as
	// stored: at most store.MaxStorableText bytes.
	Error string
	// TimedOut says the attempt ran out of its timeout.
	TimedOut bool
	// RetryIn is how long a retried or snoozed job waits before it runs
	// again.
	RetryIn time.Duration
	// Runtime is how long the attempt ran.
	Runtime time.Duration
	// At is when the attempt finished.
	At time.Time
}

// DefaultEventBuffer is the buffer of a subscription made by Subscribe.
const DefaultEventBuffer = 1024

// Subscription receives the events of the workers running this registry
// in the current process. Its channel has a bounded buffer: while it is
// full, further events for it are dropped and counted (Dropped), so that a
// slow reader never holds up a worker.
type Subscription struct {
	hub     *eventHub
	c       chan Event
	kinds   []EventKind // empty: every kind
	dropped atomic.Int64
	once    sync.Once
}

// Events is the subscription's channel; it is closed by Close.
func (s *Subscription) Events() <-chan Event { return s.c }

// Dropped is how many events were dropped because the channel was full.
func (s *Subscription) Dropped() int64 { return s.dropped.Load() }

// Close ends the subscription and closes its channel; events still
// buffered can be read. It is safe to call twice.
func (s *Subscription) Close() {
	s.once.Do(func() {
		h := s.hub
		h.mu.Lock()
		h.subs = slices.DeleteFunc(h.subs, func(o *Subscription) bool { return o == s })
		h.count.Store(int32(len(h.subs)))
		h.mu.Unlock()
		close(s.c)
	})
}

// Subscribe returns a subscription to the events of the given kinds (all
// kinds when none is given) with a buffer of DefaultEventBuffer; see
// SubscribeBuffer.
func (r *Registry) Subscribe(kinds ...EventKind) *Subscription {
	return r.SubscribeBuffer(DefaultEventBuffer, kinds...)
}

// SubscribeBuffer returns a subscription to the events of the given kinds
// (all kinds when none is given) whose channel buffers n events (at least
// one).
//
// A worker sends an event once the attempt's outcome is written to the
// database, never before: a subscriber sees nothing that a crash could
// still undo. An attempt whose outcome was not written (its lease was
// lost: the job was released and may run elsewhere) sends nothing.
// Delivery is at most once, in the order each worker wrote the outcomes; the
// database's history stays the record.
//
// Events come from the workers of the process the subscription lives in.
// `app fleet` runs each worker as a child process of the app's own binary
// (`app fleet:work`), which builds its Registry from the same main, so a
// subscription made in main, next to the Handle calls, works in every
// child: each child delivers the events of its own workers. The master
// process runs no jobs, and its subscriptions stay quiet.
func (r *Registry) SubscribeBuffer(n int, kinds ...EventKind) *Subscription {
	s := &Subscription{hub: &r.events, c: make(chan Event, max(n, 1)), kinds: slices.Clone(kinds)}
	h := &r.events
	h.mu.Lock()
	h.subs = append(h.subs, s)
	h.count.Store(int32(len(h.subs)))
	h.mu.Unlock()
	return s
}

// Publish delivers e to the subscriptions that want its kind, never
// waiting: a full subscription drops it. Workers call it for each outcome
// they wrote; an app's tests may call it to drive their subscribers. With
// no subscription it costs an atomic load.
func (r *Registry) Publish(e Event) {
	h := &r.events
	if h.count.Load() == 0 {
		return
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, s := range h.subs {
		if len(s.kinds) > 0 && !slices.Contains(s.kinds, e.Kind) {
			continue
		}
		select {
		case s.c <- e:
		default:
			s.dropped.Add(1)
		}
	}
}

// Subscribed reports whether any subscription is open, so that a caller
// can skip building events nobody reads.
func (r *Registry) Subscribed() bool { return r.events.count.Load() > 0 }

// eventHub holds a registry's subscriptions.
type eventHub struct {
	mu    sync.RWMutex
	subs  []*Subscription
	count atomic.Int32 // len(subs), read without the lock
}
