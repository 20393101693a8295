package queue

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/fleet-go/fleet/store"
)

// notifyTimeout bounds one notification.
const notifyTimeout = 5 * time.Second

// notifier wakes idle workers after a dispatch, coalesced per queue: at
// most one notification per queue is in flight from a client, and
// dispatches that commit while it is in flight are covered by one more
// sent right after it. A quiet queue is notified by the inserting
// statement itself (begin, end), in the same round trip; a busy one costs
// one small transaction of its own per round trip, however many jobs are
// dispatched, so that concurrent dispatches do not queue behind
// PostgreSQL's notify lock.
//
// The goroutine that sends is started by the dispatch that found the queue
// idle and ends as soon as no dispatch is waiting for it.
type notifier struct {
	st *store.Store

	mu     sync.Mutex
	queues map[string]*notifyState
}

type notifyState struct {
	busy  bool // a sender goroutine owns this queue
	again bool // a dispatch committed while it was sending
}

func newNotifier(st *store.Store) *notifier {
	return &notifier{st: st, queues: map[string]*notifyState{}}
}

// wake notifies queues whose jobs just committed.
func (n *notifier) wake(queues []string) {
	var start []string
	n.mu.Lock()
	for _, q := range queues {
		s := n.queues[q]
		if s == nil {
			s = &notifyState{}
			n.queues[q] = s
		}
		if s.busy {
			s.again = true
			continue
		}
		s.busy = true
		start = append(start, q)
	}
	n.mu.Unlock()
	if len(start) > 0 {
		go n.send(start)
	}
}

// begin returns those of queues that no notification is in flight for,
// marked as notified by the caller's own statement; the caller then calls
// end.
func (n *notifier) begin(queues []string) []string {
	var own []string
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, q := range queues {
		if n.queues[q] != nil {
			continue
		}
		n.queues[q] = &notifyState{busy: true}
		own = append(own, q)
	}
	return own
}

// end follows the statement that carried begin's notifications: the
// dispatches that committed meanwhile get one more.
func (n *notifier) end(own []string) {
	if len(own) == 0 {
		return
	}
	var more []string
	n.mu.Lock()
	for _, q := range own {
		if s := n.queues[q]; s.again {
			s.again = false
			more = append(more, q)
		} else {
			delete(n.queues, q)
		}
	}
	n.mu.Unlock()
	if len(more) > 0 {
		go n.send(more)
	}
}

// send notifies queues until no dispatch is waiting on them.
func (n *notifier) send(queues []string) {
	for len(queues) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
		if err := n.st.QueueNotify(ctx, queues); err != nil {
			// Workers find the jobs at their next poll.
			slog.Debug("notify idle workers failed; they will poll", "queues", queues, "err", err)
		}
		cancel()
		n.mu.Lock()
		more := queues[:0]
		for _, q := range queues {
			s := n.queues[q]
			if s.again {
				s.again = false
				more = append(more, q)
				continue
			}
			s.busy = false
			delete(n.queues, q)
		}
		n.mu.Unlock()
		queues = more
	}
}

// readyQueues lists, once each, the queues of jobs available at once.
func readyQueues(params []store.JobInsertParams) []string {
	var out []string
	for _, p := range params {
		if p.Delay > 0 {
			continue
		}
		found := false
		for _, q := range out {
			if q == p.Queue {
				found = true
				break
			}
		}
		if !found {
			out = append(out, p.Queue)
		}
	}
	return out
}
