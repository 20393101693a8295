package queue

import (
	"context"
	"log/slog"
	"slices"
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

	mu sync.Mutex
	// inFlight holds the queues a notification is in flight for: true once
	// a dispatch has committed since it was sent, so one more is owed.
	inFlight map[string]bool
}

func newNotifier(st *store.Store) *notifier {
	return &notifier{st: st, inFlight: map[string]bool{}}
}

// wake notifies queues whose jobs just committed: at once where no
// notification is in flight, else by one more after it.
func (n *notifier) wake(queues []string) {
	var start []string
	n.mu.Lock()
	for _, q := range queues {
		if _, ok := n.inFlight[q]; ok {
			n.inFlight[q] = true
			continue
		}
		n.inFlight[q] = false
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
		if _, ok := n.inFlight[q]; !ok {
			n.inFlight[q] = false
			own = append(own, q)
		}
	}
	return own
}

// end follows the statement that carried begin's notifications: the
// dispatches that committed meanwhile get one more.
func (n *notifier) end(own []string) {
	if more := n.settle(own); len(more) > 0 {
		go n.send(more)
	}
}

// settle ends the notifications in flight for queues and returns those
// owed one more, which stay in flight.
func (n *notifier) settle(queues []string) []string {
	var more []string
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, q := range queues {
		if n.inFlight[q] {
			n.inFlight[q] = false
			more = append(more, q)
		} else {
			delete(n.inFlight, q)
		}
	}
	return more
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
		queues = n.settle(queues)
	}
}

// readyQueues lists, once each, the queues of jobs available at once.
func readyQueues(params []store.JobInsertParams) []string {
	var out []string
	for _, p := range params {
		if p.Delay <= 0 && !slices.Contains(out, p.Queue) {
			out = append(out, p.Queue)
		}
	}
	return out
}
