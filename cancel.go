package fleet

import (
	"context"
	"fmt"

	fleetqueue "github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

// CancelOutcome is what a cancel did to one job.
type CancelOutcome string

// What a cancel did to a job.
const (
	// CancelDone: the job was not running (pending, delayed or waiting for
	// a concurrency slot); it is gone, recorded as cancelled.
	CancelDone CancelOutcome = "cancelled"
	// CancelRequested: the job is running; its worker stops the handler
	// (its context is cancelled with queue.ErrCancelled as the cause) and
	// records the attempt as cancelled. It is never retried.
	CancelRequested CancelOutcome = "cancel_requested"
	// CancelNotFound: no such job is queued: it finished, failed, was
	// cancelled already, or never existed.
	CancelNotFound CancelOutcome = "not_found"
)

// CancelledJob is what a cancel did to one job.
type CancelledJob struct {
	ID      int64         `json:"id"`
	Outcome CancelOutcome `json:"outcome"`
}

// CancelResult is what Cancel did, per id in the order given.
type CancelResult struct {
	Jobs []CancelledJob `json:"jobs"`
	// NotFound lists the ids of the jobs that were not found.
	NotFound []int64 `json:"not_found"`
}

// QueueCancelResult is what CancelQueue did.
type QueueCancelResult struct {
	Queue string `json:"queue"`
	// Cancelled counts the jobs that were not running, now gone.
	Cancelled int `json:"cancelled"`
	// Requested counts the running jobs whose workers were asked to stop
	// them.
	Requested int `json:"cancel_requested"`
}

// QueueCancelCount is what CancelQueue would touch now.
type QueueCancelCount struct {
	Queue string `json:"queue"`
	// Waiting counts the jobs no worker holds: pending, delayed, limited.
	Waiting int64 `json:"waiting"`
	// Running counts the jobs workers hold.
	Running int64 `json:"running"`
}

type actorKey struct{}

// DefaultActor is who a cancel is recorded as made by when the context
// names no one (see WithActor).
const DefaultActor = "api"

// WithActor returns ctx naming who acts on the fleet through it (a user,
// a token): Cancel and CancelQueue record it with the jobs they cancel.
func WithActor(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, actorKey{}, who)
}

func actor(ctx context.Context) string {
	if who, ok := ctx.Value(actorKey{}).(string); ok && who != "" {
		return who
	}
	return DefaultActor
}

// Cancel cancels jobs by id (see CancelOutcome), recording who did it
// (WithActor). It fails only when the database does; ids it did not find
// are in the result's NotFound.
func (s *Service) Cancel(ctx context.Context, ids ...int64) (CancelResult, error) {
	out := CancelResult{Jobs: []CancelledJob{}, NotFound: []int64{}}
	if len(ids) == 0 {
		return out, nil
	}
	for _, id := range ids {
		if id < 1 {
			return out, fmt.Errorf("cancel job %d: a job id is a positive whole number", id)
		}
	}
	res, err := s.st.JobCancel(ctx, ids, actor(ctx))
	if err != nil {
		return out, err
	}
	for _, r := range res {
		out.Jobs = append(out.Jobs, CancelledJob{ID: r.ID, Outcome: CancelOutcome(r.State)})
		if r.State == store.JobCancelNotFound {
			out.NotFound = append(out.NotFound, r.ID)
		}
	}
	return out, nil
}

// CancelJob cancels one job and says what it did; a job it did not find
// is ErrJobNotFound.
func (s *Service) CancelJob(ctx context.Context, id int64) (CancelOutcome, error) {
	res, err := s.Cancel(ctx, id)
	if err != nil {
		return "", err
	}
	if len(res.NotFound) > 0 {
		return CancelNotFound, fmt.Errorf("cancel job %d: no such job is queued: %w", id, ErrJobNotFound)
	}
	return res.Jobs[0].Outcome, nil
}

// CancelQueue cancels every job of queue queued when it starts: the ones
// no worker holds at once, in batches, then it asks for the cancel of the
// running ones. Jobs dispatched meanwhile are left alone.
func (s *Service) CancelQueue(ctx context.Context, queue string) (QueueCancelResult, error) {
	if err := fleetqueue.CheckQueue("queue", queue); err != nil {
		return QueueCancelResult{}, err
	}
	res, err := s.st.JobCancelQueue(ctx, store.JobCancelQueueParams{Queue: queue, By: actor(ctx)})
	if err != nil {
		return QueueCancelResult{}, err
	}
	return QueueCancelResult{Queue: queue, Cancelled: res.Cancelled, Requested: res.Requested}, nil
}

// CancelQueueCount says what CancelQueue would touch now.
func (s *Service) CancelQueueCount(ctx context.Context, queue string) (QueueCancelCount, error) {
	if err := fleetqueue.CheckQueue("queue", queue); err != nil {
		return QueueCancelCount{}, err
	}
	waiting, running, err := s.st.JobCancelQueueCount(ctx, queue)
	if err != nil {
		return QueueCancelCount{}, err
	}
	return QueueCancelCount{Queue: queue, Waiting: waiting, Running: running}, nil
}
