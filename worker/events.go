package worker

import (
	"time"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

// publish sends the subscribers of the worker's registry an event for each
// outcome of batch the database took: those whose lease was still held
// (not in lost). An outcome marked InTx whose lease is gone was completed
// by its handler's transaction, which committed: it counts as completed.
// (Its lease is gone otherwise only when the transaction rolled back and a
// master then released the job, presuming its worker gone; the event is
// then wrong, which is as rare as it sounds.) Other lost outcomes send
// nothing. Config.OnEvent gets the same events. It costs nothing while
// nobody subscribes.
func (w *writer) publish(batch []store.JobOutcome, lost []store.Lease) {
	subscribed := w.events != nil && w.events.Subscribed()
	if !subscribed && w.onEvent == nil {
		return
	}
	var gone map[store.Lease]bool
	if len(lost) > 0 {
		gone = make(map[store.Lease]bool, len(lost))
		for _, l := range lost {
			gone[l] = true
		}
	}
	for _, o := range batch {
		if gone[o.Lease] {
			if !o.InTx {
				continue
			}
			o.Kind, o.Status, o.Error, o.Delay = store.OutcomeCompleted, "completed", "", 0
		}
		e := eventOf(o)
		if subscribed {
			w.events.Publish(e)
		}
		if w.onEvent != nil {
			w.onEvent(e)
		}
	}
}

// eventOf is the event of a written outcome. Its kind comes from the
// attempt's status where that says more than the outcome's kind
// (cancelled, snoozed), else from the kind: completed, retried, failed.
func eventOf(o store.JobOutcome) queue.Event {
	e := queue.Event{
		JobID: o.ID, Name: o.Name, Queue: o.Queue, Attempt: o.Attempt, MaxTries: o.MaxTries,
		Error: store.StorableText(o.Error), TimedOut: o.Status == "timed_out",
		Runtime: time.Duration(o.RuntimeMs * float64(time.Millisecond)), At: o.FinishedAt,
	}
	switch o.Status {
	case "cancelled":
		e.Kind = queue.EventCancelled
	case "snoozed":
		e.Kind = queue.EventSnoozed
	default:
		switch o.Kind {
		case store.OutcomeCompleted:
			e.Kind = queue.EventCompleted
		case store.OutcomeRetried:
			e.Kind = queue.EventRetried
		case store.OutcomeFailed:
			e.Kind = queue.EventFailed
		default:
			e.Kind = queue.EventKind(o.Kind)
		}
	}
	if e.Kind == queue.EventRetried || e.Kind == queue.EventSnoozed {
		e.RetryIn = o.Delay
	}
	return e
}
