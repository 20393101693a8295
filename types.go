package fleet

import (
	"context"

	"github.com/fleet-go/fleet/model"
)

// ErrFailedJobNotFound is returned (wrapped) by Retry, Forget, FailedJob
// and FailedJobStory for an id that does not exist (any more). It matches
// model.ErrNotFound, as every not-found error does.
var ErrFailedJobNotFound = model.ErrFailedJobNotFound

// ErrJobNotFound is returned (wrapped) by Job for a job id that no table
// knows: not queued, not failed, and no recorded attempt (or its history
// was trimmed). It matches model.ErrNotFound.
var ErrJobNotFound = model.ErrJobNotFound

// FailedFilter selects failed jobs. Search matches the name, queue, error
// or payload as people are shown them, case-insensitively and literally: a
// value redacted in the output (log.redact) never matches, in the payload
// or in the error. Queue matches exactly. Limit 0 is no limit.
type FailedFilter = model.FailedFilter

// FailedJob is a row of queue_failed_jobs: a job whose tries are spent.
type FailedJob = model.FailedJob

// QueuedJob is a job not finished yet: pending, delayed, limited (waiting
// for a slot of its concurrency limit; AvailableAt is then when it may run
// once it has one) or reserved.
type QueuedJob = model.QueuedJob

// FinishedJob is one recorded attempt of a job (a row of fleet_jobs).
type FinishedJob = model.FinishedJob

// MetricsRow is one snapshot bucket of a queue (Kind "queue") or a job
// name (Kind "job"), Subject naming it.
type MetricsRow = model.MetricsRow

// LongWaitDetected says a queue's oldest ready job has waited longer than
// the queue's threshold.
type LongWaitDetected = model.LongWaitDetected

// ReportedSupervisor is one supervisor as its master reports it.
type ReportedSupervisor = model.ReportedSupervisor

// OldestWaits reads the wait in seconds of the oldest ready job of each of
// queues (absent: no ready job). *Service's store satisfies it, as does
// the master's.
type OldestWaits interface {
	QueueOldestWait(ctx context.Context, queues []string) (map[string]float64, error)
}
