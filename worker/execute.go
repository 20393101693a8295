package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/internal/jobhook"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/redact"
	"github.com/fleet-go/fleet/store"
)

// Executing: the second of the hot path's three roles, between fetching
// (the claimer) and completing (the completer, see complete.go).
//
// A started job's attempt runs its handler on a runner (executor.run).
// When it ends, the claimer hands what is known of the end (attemptEnd:
// how the handler returned, when the attempt started, whether an operator
// cancelled it, whether the claimer gave up on it) to decide, a pure
// function that says what becomes of the attempt (verdict): completed,
// retried, snoozed, cancelled, failed for good, or completed in the
// handler's own transaction. The executor applies the verdict: it writes
// the verdict's log line and hands the outcome to the completer.

// executor runs attempts and applies their verdicts. It has no state of
// its own: run is called by the runners, settle by the claimer's loop.
type executor struct {
	st        *store.Store
	jobs      *queue.Registry
	worker    string
	master    string
	now       func() time.Time
	log       *slog.Logger
	redactor  *redact.Redactor
	completer completer
}

func newExecutor(st *store.Store, jobs *queue.Registry, cfg Config, log *slog.Logger, comp completer) *executor {
	return &executor{st: st, jobs: jobs, worker: cfg.Name, master: cfg.Master, now: cfg.Now, log: log,
		redactor: redact.New(cfg.Redact), completer: comp}
}

// task is a started job for a runner.
type task struct {
	ctx     context.Context
	job     store.ClaimedJob
	started time.Time
	timeout time.Duration
}

// finished is how an attempt's handler returned.
type finished struct {
	job     store.ClaimedJob
	err     error
	timeout time.Duration
	expired bool // the job's context ran out before it returned
	ended   time.Time
	// inTx: the handler completed the job in its own transaction
	// (queue.Job.CompleteTx), which may or may not have committed.
	inTx bool
}

// run runs one attempt and returns how it ended.
func (e *executor) run(t task) finished {
	var inTx atomic.Bool
	err := e.call(t.ctx, &t.job, t.started, &inTx)
	// Nothing of the worker's keeps the payload once the handler returned:
	// the claimer's record of the job never had it.
	t.job.Payload = nil
	return finished{job: t.job, err: err, timeout: t.timeout, expired: errors.Is(t.ctx.Err(), context.DeadlineExceeded),
		ended: e.now(), inTx: inTx.Load()}
}

// call runs the handler through the registry (queue.Registry.Run: the
// handler in its work middleware, then the error hooks), which also turns
// a panic into a failed attempt carrying the panic value and stack. inTx
// is set once the handler has completed the job in its own transaction.
func (e *executor) call(ctx context.Context, j *store.ClaimedJob, started time.Time, inTx *atomic.Bool) error {
	job := &queue.Job{
		ID: j.ID, Name: j.Name, Queue: j.Queue, Payload: j.Payload,
		Attempt: j.Attempt, MaxTries: j.MaxTries, Snoozes: j.Snoozes, CreatedAt: j.CreatedAt,
		Priority: j.Priority, Tags: j.Tags, Metadata: j.Metadata,
	}
	jobhook.Attach(job, func(ctx context.Context, tx pgx.Tx) error {
		if inTx.Load() {
			return fmt.Errorf("complete job %d (%s) in a transaction: already completed", j.ID, j.Name)
		}
		o := outcome(*j, started, e.now(), store.OutcomeCompleted, "completed", "")
		if err := e.st.JobCompleteTx(ctx, tx, e.worker, e.master, o); err != nil {
			return err
		}
		inTx.Store(true)
		return nil
	})
	return e.jobs.Run(ctx, job)
}

// attemptEnd is what decide knows of an attempt that ended.
type attemptEnd struct {
	finished
	started time.Time
	// cancelAt is when an operator cancelled the job while it ran, cancelBy
	// who (zero: not cancelled).
	cancelAt time.Time
	cancelBy string
	// abandoned: the handler ignored its timeout or cancel past grace and
	// the claimer gave up on it; ended is when, timeout the job's, and err
	// and inTx are unknown.
	abandoned bool
	grace     time.Duration
}

// verdict is what becomes of an attempt: the outcome to write and the log
// line that says so.
type verdict struct {
	outcome store.JobOutcome
	note    note
	// shown is the error text the log line carries, before redaction.
	shown string
	// runtime is the attempt's, for noteCompleted.
	runtime time.Duration
}

// note names the log line of a verdict.
type note uint8

const (
	noteNone               note = iota
	noteCompleted               // debug: the job completed
	noteCancelledByHandler      // the handler returned queue.Cancel
	noteRetry                   // a failed attempt, retried after its backoff
	noteFailed                  // a failed attempt with no tries left
	noteInTxFailed              // a handler failed after completing its job in its transaction
)

// decide says what becomes of an attempt. It is pure: it reads only e
// and returns the verdict, which settle applies.
//
// An attempt an operator cancelled is cancelled, unless its handler
// returned nil anyway (then its work is done: it completed). A handler's
// queue.Cancel cancels it, queue.Snooze snoozes it (a snooze beyond
// queue.MaxSnoozes is a failed attempt instead). An attempt whose handler
// completed the job in its own transaction is written as failed with an
// outcome marked InTx, which the lease check applies only when that
// transaction did not commit. Any other error fails the attempt: it is
// retried after its backoff while tries remain, failed for good
// otherwise. An attempt the claimer gave up on is timed out, or
// cancelled when an operator cancelled it.
func decide(e attemptEnd) verdict {
	if e.abandoned {
		if !e.cancelAt.IsZero() {
			msg := fmt.Sprintf("cancelled by %s; the handler did not stop within %s", e.cancelBy, e.grace)
			return verdict{outcome: outcome(e.job, e.started, e.ended, store.OutcomeCancelled, "cancelled", store.StorableText(msg))}
		}
		msg := fmt.Sprintf("timed out after %s and did not stop within %s", e.timeout, e.grace)
		return failure(e.job, e.started, e.ended, "timed_out", msg)
	}
	if e.err != nil || (!e.cancelAt.IsZero() && e.inTx) {
		if v, ok := decideStopped(e); ok {
			return v
		}
	}
	if e.inTx {
		return decideInTx(e)
	}
	if e.err == nil {
		return verdict{outcome: outcome(e.job, e.started, e.ended, store.OutcomeCompleted, "completed", ""),
			note: noteCompleted, runtime: e.ended.Sub(e.started)}
	}
	// The error text is made storable here, where it is produced: a handler's
	// error may hold NUL bytes or invalid UTF-8, which a text column refuses.
	msg, status := store.StorableText(e.err.Error()), "failed"
	if e.expired {
		msg, status = fmt.Sprintf("timed out after %s: %s", e.timeout, msg), "timed_out"
	}
	return failure(e.job, e.started, e.ended, status, msg)
}

// decideStopped decides the attempts that end other than by completing or
// failing, and reports whether e was one: an operator cancelled the job
// while it ran, the handler returned queue.Cancel, or queue.Snooze.
func decideStopped(e attemptEnd) (verdict, bool) {
	var snooze *queue.SnoozeError
	switch {
	case !e.cancelAt.IsZero() && (e.err != nil || e.inTx):
		msg := "cancelled by " + e.cancelBy
		if e.err != nil {
			msg += ": " + e.err.Error()
		}
		return stopped(e, store.OutcomeCancelled, "cancelled", msg, 0), true
	case errors.Is(e.err, queue.ErrCancelled):
		v := stopped(e, store.OutcomeCancelled, "cancelled", e.err.Error(), 0)
		v.note, v.shown = noteCancelledByHandler, e.err.Error()
		return v, true
	case errors.As(e.err, &snooze):
		if e.job.Snoozes >= queue.MaxSnoozes {
			if e.inTx {
				return verdict{}, false // decideInTx fails it; its error says why
			}
			msg := fmt.Sprintf("the job snoozed more than %d times (queue.MaxSnoozes)", queue.MaxSnoozes)
			return failure(e.job, e.started, e.ended, "failed", msg), true
		}
		return stopped(e, store.OutcomeSnoozed, "snoozed", e.err.Error(), snooze.Delay), true
	}
	return verdict{}, false
}

func stopped(e attemptEnd, kind store.OutcomeKind, status, msg string, delay time.Duration) verdict {
	o := outcome(e.job, e.started, e.ended, kind, status, store.StorableText(msg))
	o.Delay, o.InTx = delay, e.inTx
	return verdict{outcome: o}
}

// decideInTx decides an attempt whose handler completed its job in its own
// transaction. When that committed, the job is gone and nothing is left to
// write; the worker cannot tell, so it writes the attempt as failed with an
// outcome marked InTx, which the lease check applies only when the
// transaction did not commit (then the handler's effects are not there
// either, and the job is retried).
func decideInTx(e attemptEnd) verdict {
	var v verdict
	msg, status := "the job was completed in its handler's transaction, which did not commit", "failed"
	if e.err != nil {
		msg = store.StorableText(e.err.Error())
		v.note, v.shown = noteInTxFailed, msg
	}
	if e.expired {
		msg, status = fmt.Sprintf("timed out after %s: %s", e.timeout, msg), "timed_out"
	}
	v.outcome = outcome(e.job, e.started, e.ended, store.OutcomeFailed, status, msg)
	v.outcome.InTx = true
	if e.job.Attempt < e.job.MaxTries {
		v.outcome.Kind, v.outcome.Delay = store.OutcomeRetried, queue.RetryDelay(e.job.BackoffSecs, e.job.Attempt)
	}
	return v
}

// failure is a failed attempt: retried after its backoff while tries
// remain, moved to failed jobs otherwise.
func failure(j store.ClaimedJob, started, ended time.Time, status, msg string) verdict {
	if j.Attempt >= j.MaxTries {
		return verdict{outcome: outcome(j, started, ended, store.OutcomeFailed, status, msg), note: noteFailed, shown: msg}
	}
	o := outcome(j, started, ended, store.OutcomeRetried, status, msg)
	o.Delay = queue.RetryDelay(j.BackoffSecs, j.Attempt)
	return verdict{outcome: o, note: noteRetry, shown: msg}
}

// outcome is the outcome of one attempt with its history, timed by the
// real clock.
func outcome(j store.ClaimedJob, started, ended time.Time, kind store.OutcomeKind, status, msg string) store.JobOutcome {
	return store.JobOutcome{
		Lease: j.Lease(), Kind: kind, Status: status, Error: msg, MaxTries: j.MaxTries,
		Queue: j.Queue, Name: j.Name, Attempt: j.Attempt, ReservedAt: j.ReservedAt,
		// On the database clock, as ReservedAt (see ClaimedJob.ClockOffset).
		StartedAt: started.Add(j.ClockOffset), FinishedAt: ended.Add(j.ClockOffset),
		RuntimeMs: float64(ended.Sub(started).Microseconds()) / 1000,
	}
}

// settle decides an attempt and applies the verdict.
func (e *executor) settle(end attemptEnd) { e.apply(decide(end)) }

// apply writes v's log line and hands its outcome to the completer. Logs
// carry the error with secrets redacted; the payload is never logged.
func (e *executor) apply(v verdict) {
	o := &v.outcome
	switch v.note {
	case noteCompleted:
		if e.log.Enabled(context.Background(), slog.LevelDebug) {
			e.log.Debug("job completed", "job_id", o.ID, "job", o.Name, "queue", o.Queue,
				"attempt", o.Attempt, "runtime", v.runtime.Round(time.Microsecond))
		}
	case noteCancelledByHandler:
		e.log.Info("job cancelled by its handler", "job_id", o.ID, "job", o.Name, "queue", o.Queue,
			"attempt", o.Attempt, "err", e.redactor.Text(v.shown))
	case noteRetry:
		e.log.Info("job attempt failed; will retry", "job_id", o.ID, "job", o.Name, "queue", o.Queue,
			"attempt", o.Attempt, "tries", o.MaxTries, "retry_in", o.Delay, "err", e.redactor.Text(v.shown))
	case noteFailed:
		e.log.Warn("job failed for good", "job_id", o.ID, "job", o.Name, "queue", o.Queue,
			"attempt", o.Attempt, "tries", o.MaxTries, "err", e.redactor.Text(v.shown))
	case noteInTxFailed:
		e.log.Info("job failed after completing in its transaction; if that committed the job is done, otherwise it is retried",
			"job_id", o.ID, "job", o.Name, "queue", o.Queue, "attempt", o.Attempt, "err", e.redactor.Text(v.shown))
	}
	e.completer.add(v.outcome)
}
