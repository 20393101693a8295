package master

import "sync"

// The services talk through mailboxes, never by sharing their state, and
// no send blocks: supervision in particular never waits on another
// service.

// latest is a mailbox of one value, from one service to another: put
// replaces a value the reader has not taken yet, so the reader always
// takes the newest (the latest pause state, workload, overdue workers).
type latest[T any] struct {
	ch chan T
}

func newLatest[T any]() *latest[T] { return &latest[T]{ch: make(chan T, 1)} }

// put leaves v for the reader, replacing what it has not taken. It never
// blocks; with one writer per mailbox it loops at most twice.
func (l *latest[T]) put(v T) {
	for {
		select {
		case l.ch <- v:
			return
		default:
		}
		select {
		case <-l.ch: // the older value, unread
		default:
		}
	}
}

// c is the channel to select on to take the value.
func (l *latest[T]) c() <-chan T { return l.ch }

// take returns the waiting value, if any, without waiting.
func (l *latest[T]) take() (T, bool) {
	select {
	case v := <-l.ch:
		return v, true
	default:
		var zero T
		return zero, false
	}
}

// fifo is a mailbox of every value, in order, whose push never blocks.
// It is unbounded on purpose: it carries the exited workers whose jobs
// this master alone releases (its row lives on, so no peer would), so
// none may be dropped; an entry is a few words, one per exited worker,
// and crash backoff bounds how fast workers can exit.
type fifo[T any] struct {
	mu    sync.Mutex
	items []T
	// pushed has a value after a push the reader has not seen (see
	// ready); made on first use.
	once   sync.Once
	pushed chan struct{}
}

func (q *fifo[T]) signal() chan struct{} {
	q.once.Do(func() { q.pushed = make(chan struct{}, 1) })
	return q.pushed
}

// push appends v.
func (q *fifo[T]) push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
	select {
	case q.signal() <- struct{}{}:
	default:
	}
}

// ready is a channel to select on: it delivers a value once something
// was pushed since it last did, so a reader takes the values at once
// rather than at its next tick.
func (q *fifo[T]) ready() <-chan struct{} { return q.signal() }

// takeAll returns everything pushed since the last call, oldest first.
func (q *fifo[T]) takeAll() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.items
	q.items = nil
	return out
}

// len is how many values wait.
func (q *fifo[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}
