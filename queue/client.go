package queue

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/store"
)

// Defaults are applied to jobs that do not set their own values. Leave
// Tries, Backoff and Timeout unset to let the worker that runs a job apply
// its supervisor's defaults (and then the queue section's): a job stores only
// what was set for it.
type Defaults struct {
	Queue   string        // default "default"
	Tries   int           // 0: the worker's default
	Backoff []int         // nil: the worker's default
	Timeout time.Duration // 0: the worker's default
	// MaxPayloadBytes is the largest payload a dispatch accepts, in bytes
	// of JSON; 0: DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// Limits maps job-name patterns (path.Match: "exports.*") to a
	// concurrency limit, as the [queue.limits] config does: a job whose
	// name matches and which sets no Limit of its own runs under the key
	// NameLimitKeyPrefix + pattern ("name:exports.*"), which every job
	// matching the pattern shares, with that limit. When several patterns
	// match, the longest wins (then the first in byte order). Check it with
	// CheckNameLimits (config.Load checks [queue.limits]): a malformed
	// pattern matches no name, and a job given a limit below 1 is refused
	// at dispatch.
	Limits map[string]int
}

// DefaultMaxPayloadBytes is the largest payload a Client accepts unless its
// Defaults say otherwise (1 MiB), as the queue.max_payload_bytes default.
const DefaultMaxPayloadBytes = 1 << 20

// DefaultQueue is the queue of a job that names none, when Defaults does
// not say otherwise.
const DefaultQueue = "default"

// Client dispatches jobs. It is safe for concurrent use; share one per
// pool, so that concurrent dispatches share inserts and their wake-up
// notifications. It starts no goroutine: all its work is done within the
// dispatching calls, so it needs no Close.
type Client struct {
	store    *store.Store
	defaults Defaults
	limits   []nameLimit // Defaults.Limits in matching order
	inserter *inserter
	// dispatchMW is the dispatch middleware (see Use); nil: none.
	dispatchMW atomic.Pointer[[]DispatchMiddleware]
	mwMu       sync.Mutex // serializes Use
	// unworked is the OnUnworked check; nil: none.
	unworked atomic.Pointer[unworkedCheck]
}

// NewClient returns a client dispatching on pool.
func NewClient(pool *pgxpool.Pool, d Defaults) *Client {
	d.Queue = cmp.Or(d.Queue, DefaultQueue)
	st := store.New(pool)
	return &Client{store: st, defaults: d, limits: nameLimits(d.Limits), inserter: newInserter(st)}
}

// DispatchResult is what a dispatch did with one job.
type DispatchResult struct {
	// ID is the job's id: the new job's, or, for a duplicate, the id of
	// the job it duplicates.
	ID int64
	// Duplicate is set when nothing was inserted because a job with the
	// same unique key counts (see Unique); ID is then that job's.
	Duplicate bool
}

// Dispatch inserts job and says what became of it. Idle workers of its
// queue wake within milliseconds: the inserting statement notifies them
// as it commits, in the same round trip (DispatchTx is the transactional
// form).
func (c *Client) Dispatch(ctx context.Context, job *JobSpec) (DispatchResult, error) {
	res, err := c.DispatchMany(ctx, []*JobSpec{job})
	if err != nil {
		return DispatchResult{}, err
	}
	return res[0], nil
}

// DispatchTx inserts job inside tx: the job exists only if tx commits, and
// workers are notified at commit. The notification is part of tx, so its
// commit takes PostgreSQL's database-wide notify lock: concurrent
// transactions that dispatch commit one after another. For high dispatch
// rates outside a transaction of your own, use Dispatch or DispatchMany.
func (c *Client) DispatchTx(ctx context.Context, tx pgx.Tx, job *JobSpec) (DispatchResult, error) {
	res, err := c.DispatchManyTx(ctx, tx, []*JobSpec{job})
	if err != nil {
		return DispatchResult{}, err
	}
	return res[0], nil
}

// DispatchMany inserts jobs in one statement, all or none, and says what
// became of each, in order. Dispatches made at the same time from several
// goroutines share statements and commits: while one insert is in flight
// the others gather, and go together in the next (each call still succeeds
// or fails on its own).
func (c *Client) DispatchMany(ctx context.Context, jobs []*JobSpec) ([]DispatchResult, error) {
	res, _, err := c.insert(ctx, nil, jobs)
	return res, err
}

// DispatchManyTx is DispatchMany inside the caller's transaction.
func (c *Client) DispatchManyTx(ctx context.Context, tx pgx.Tx, jobs []*JobSpec) ([]DispatchResult, error) {
	res, queues, err := c.insert(ctx, tx, jobs)
	if err != nil {
		return nil, err
	}
	if err := store.QueueNotifyTx(ctx, tx, queues); err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	return res, nil
}

// DispatchSQLTx is DispatchTx for a database/sql transaction: the job
// exists only if tx commits, and idle workers of its queue are notified
// inside tx, so they wake as it commits (and never for a rollback). tx
// must come from the pgx stdlib driver (import
// github.com/jackc/pgx/v5/stdlib and sql.Open("pgx", url), or
// stdlib.OpenDBFromPool); with another driver the insert fails with that
// driver's error about array arguments. The Client's own pool is not used.
func (c *Client) DispatchSQLTx(ctx context.Context, tx *sql.Tx, job *JobSpec) (DispatchResult, error) {
	res, err := c.DispatchManySQLTx(ctx, tx, []*JobSpec{job})
	if err != nil {
		return DispatchResult{}, err
	}
	return res[0], nil
}

// DispatchManySQLTx is DispatchManyTx for a database/sql transaction (see
// DispatchSQLTx): all the jobs in one statement, inside tx.
func (c *Client) DispatchManySQLTx(ctx context.Context, tx *sql.Tx, jobs []*JobSpec) ([]DispatchResult, error) {
	if tx == nil {
		return nil, errors.New("dispatch: nil *sql.Tx")
	}
	jobs, params, err := c.paramsOf(ctx, jobs)
	if err != nil {
		return nil, err
	}
	plan, err := c.planUnique(jobs, params)
	if err != nil {
		return nil, err
	}
	plain, err := store.JobInsertManySQL(ctx, tx, plan.plain)
	if err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	uniq, err := store.JobInsertUniqueSQL(ctx, tx, plan.uniq, plan.keys)
	if err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	res, queues := plan.apply(plain, uniq)
	if err := store.QueueNotifySQLTx(ctx, tx, queues); err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	c.warnUnworked(ctx, params)
	return res, nil
}

// paramsOf passes jobs through the dispatch middleware, checks them and
// turns them into insert parameters. It returns the jobs as the middleware
// left them: copies, when there is middleware, so that the caller's specs
// are never changed.
func (c *Client) paramsOf(ctx context.Context, jobs []*JobSpec) ([]*JobSpec, []store.JobInsertParams, error) {
	jobs, err := c.intercept(ctx, jobs)
	if err != nil {
		return nil, nil, err
	}
	params := make([]store.JobInsertParams, len(jobs))
	for i, j := range jobs {
		p, err := c.params(j)
		if err != nil {
			return nil, nil, err
		}
		params[i] = p
	}
	return jobs, params, nil
}

// insert inserts jobs on tx, or through the shared inserter when tx is
// nil, and returns what became of each and the queues of those available
// at once. Unique jobs take another statement (see insertWithUnique); a
// call without any pays nothing for them.
func (c *Client) insert(ctx context.Context, tx pgx.Tx, jobs []*JobSpec) ([]DispatchResult, []string, error) {
	jobs, params, err := c.paramsOf(ctx, jobs)
	if err != nil {
		return nil, nil, err
	}
	if slices.ContainsFunc(jobs, func(j *JobSpec) bool { return j.unique != nil }) {
		res, queues, err := c.insertWithUnique(ctx, tx, jobs, params)
		if err == nil {
			c.warnUnworked(ctx, params)
		}
		return res, queues, err
	}
	var ids []int64
	if tx != nil {
		ids, err = c.store.JobInsertMany(ctx, tx, params)
	} else {
		ids, err = c.inserter.insert(ctx, params)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("dispatch: %w", err)
	}
	res := make([]DispatchResult, len(ids))
	for i, id := range ids {
		res[i].ID = id
	}
	c.warnUnworked(ctx, params)
	return res, readyQueues(params), nil
}

// insertWithUnique inserts a batch holding unique jobs: the others in one
// statement, the unique ones in another (which refuses duplicates through
// their keys), in tx or in a transaction of its own that also notifies.
func (c *Client) insertWithUnique(ctx context.Context, tx pgx.Tx, jobs []*JobSpec, params []store.JobInsertParams) ([]DispatchResult, []string, error) {
	plan, err := c.planUnique(jobs, params)
	if err != nil {
		return nil, nil, err
	}
	var res []DispatchResult
	var queues []string
	run := func(tx pgx.Tx) error {
		plain, err := c.store.JobInsertMany(ctx, tx, plan.plain)
		if err != nil {
			return err
		}
		uniq, err := c.store.JobInsertUnique(ctx, tx, plan.uniq, plan.keys)
		if err != nil {
			return err
		}
		res, queues = plan.apply(plain, uniq)
		return nil
	}
	if tx != nil {
		err = run(tx)
	} else {
		err = pgx.BeginFunc(ctx, c.store.Pool(), func(tx pgx.Tx) error {
			if err := run(tx); err != nil {
				return err
			}
			return store.QueueNotifyTx(ctx, tx, queues)
		})
	}
	if err != nil {
		return nil, nil, fmt.Errorf("dispatch: %w", err)
	}
	return res, queues, nil
}

// uniquePlan splits a batch into plain and unique jobs, and the unique
// ones into first copies of each key (inserted) and later copies in the
// same batch (duplicates of the first).
type uniquePlan struct {
	plain []store.JobInsertParams
	uniq  []store.JobInsertParams
	keys  []store.UniqueParams
	// where[i] says where job i went: its index in plain (>= 0), or
	// -1-k for index k of uniq.
	where  []int
	copyOf []int // job i is a later copy of job copyOf[i] (-1: none)
}

func (c *Client) planUnique(jobs []*JobSpec, params []store.JobInsertParams) (uniquePlan, error) {
	p := uniquePlan{where: make([]int, len(jobs)), copyOf: make([]int, len(jobs))}
	first := map[store.UniqueParams]int{}
	for i, j := range jobs {
		p.copyOf[i] = -1
		if j.unique == nil {
			p.where[i] = len(p.plain)
			p.plain = append(p.plain, params[i])
			continue
		}
		u, err := uniqueParams(j, params[i].Queue)
		if err != nil {
			return p, fmt.Errorf("%w: job %q: %w", ErrInvalidJob, j.Name, err)
		}
		if f, ok := first[u]; ok {
			p.copyOf[i] = f
			continue
		}
		first[u] = i
		p.where[i] = -1 - len(p.uniq)
		p.uniq = append(p.uniq, params[i])
		p.keys = append(p.keys, u)
	}
	return p, nil
}

// apply says what became of each job given the two inserts, and returns
// the queues of the inserted jobs available at once.
func (p uniquePlan) apply(plain []int64, uniq []store.UniqueInsert) ([]DispatchResult, []string) {
	res := make([]DispatchResult, len(p.where))
	var ready []store.JobInsertParams
	for i, w := range p.where {
		switch {
		case p.copyOf[i] >= 0:
			continue
		case w >= 0:
			res[i] = DispatchResult{ID: plain[w]}
			ready = append(ready, p.plain[w])
		default:
			u := uniq[-1-w]
			res[i] = DispatchResult{ID: u.ID, Duplicate: u.Duplicate}
			if !u.Duplicate {
				ready = append(ready, p.uniq[-1-w])
			}
		}
	}
	for i, f := range p.copyOf {
		if f >= 0 {
			res[i] = DispatchResult{ID: res[f].ID, Duplicate: true}
		}
	}
	return res, readyQueues(ready)
}

// ErrInvalidJob is wrapped by every error about a job that cannot be
// dispatched as it is.
var ErrInvalidJob = errors.New("invalid job")

func (c *Client) params(j *JobSpec) (store.JobInsertParams, error) {
	return jobParams(&c.defaults, c.limits, j)
}

// jobParams checks j and turns it into insert parameters, with d's
// defaults (d.Queue set) and limits, d.Limits in matching order.
func jobParams(d *Defaults, limits []nameLimit, j *JobSpec) (store.JobInsertParams, error) {
	if j == nil {
		return store.JobInsertParams{}, fmt.Errorf("%w: nil job", ErrInvalidJob)
	}
	if j.payloadErr != nil {
		return store.JobInsertParams{}, fmt.Errorf("%w: %w", ErrInvalidJob, j.payloadErr)
	}
	if err := CheckName("JobSpec.Name", j.Name); err != nil {
		return store.JobInsertParams{}, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	queueLabel := "JobSpec.Queue"
	if j.Queue == "" {
		queueLabel = "Defaults.Queue"
	}
	if err := CheckQueue(queueLabel, cmp.Or(j.Queue, d.Queue)); err != nil {
		return store.JobInsertParams{}, fmt.Errorf("%w: job %q: %w", ErrInvalidJob, j.Name, err)
	}
	p := store.JobInsertParams{
		Queue:       cmp.Or(j.Queue, d.Queue),
		Name:        j.Name,
		Payload:     j.Payload,
		MaxTries:    cmp.Or(j.tries, d.Tries),
		BackoffSecs: j.backoff,
		Timeout:     cmp.Or(j.timeout, d.Timeout),
		Delay:       j.delay,
		RetryOf:     j.retryOf,
	}
	if j.backoff == nil {
		p.BackoffSecs = d.Backoff
	}
	limitLabel := "JobSpec.Limit"
	p.LimitKey, p.Limit = j.limitKey, j.limit
	if !j.limitSet {
		limitLabel = "Defaults.Limits"
		p.LimitKey, p.Limit = limitFor(limits, j.Name)
	}
	if j.limitSet || p.LimitKey != "" {
		if err := CheckLimit(limitLabel, p.LimitKey, p.Limit); err != nil {
			return p, fmt.Errorf("%w: job %q: %w", ErrInvalidJob, j.Name, err)
		}
	}
	switch {
	case p.MaxTries < 0:
		return p, fmt.Errorf("%w: job %q: tries must be at least 1, got %d", ErrInvalidJob, j.Name, p.MaxTries)
	case p.Delay < 0:
		return p, fmt.Errorf("%w: job %q: delay must not be negative, got %s", ErrInvalidJob, j.Name, p.Delay)
	case p.Timeout < 0 || (p.Timeout > 0 && p.Timeout < time.Millisecond):
		return p, fmt.Errorf("%w: job %q: timeout must be at least 1ms, got %s", ErrInvalidJob, j.Name, p.Timeout)
	}
	for _, b := range p.BackoffSecs {
		if b < 0 {
			return p, fmt.Errorf("%w: job %q: backoff must not be negative, got %d", ErrInvalidJob, j.Name, b)
		}
	}
	if err := CheckPriority("JobSpec.Priority", j.priority); err != nil {
		return p, fmt.Errorf("%w: job %q: %w", ErrInvalidJob, j.Name, err)
	}
	if err := CheckTags("JobSpec.Tags", j.tags); err != nil {
		return p, fmt.Errorf("%w: job %q: %w", ErrInvalidJob, j.Name, err)
	}
	if j.metaErr != nil {
		return p, fmt.Errorf("%w: job %q: JobSpec.Metadata: %w", ErrInvalidJob, j.Name, j.metaErr)
	}
	if len(j.metadata) > MaxMetadataBytes {
		return p, fmt.Errorf("%w: job %q: JobSpec.Metadata is %d bytes, more than the %d allowed",
			ErrInvalidJob, j.Name, len(j.metadata), MaxMetadataBytes)
	}
	p.Priority, p.Tags, p.Metadata = j.priority, j.tags, j.metadata
	if len(p.Payload) == 0 {
		p.Payload = []byte(`{}`)
	}
	if limit := cmp.Or(d.MaxPayloadBytes, DefaultMaxPayloadBytes); len(p.Payload) > limit {
		return p, fmt.Errorf("%w: job %q: payload is %d bytes, more than the %d allowed (Defaults.MaxPayloadBytes, queue.max_payload_bytes)",
			ErrInvalidJob, j.Name, len(p.Payload), limit)
	}
	return p, nil
}

// IDs returns the ids of a DispatchMany's results, in order.
func IDs(results []DispatchResult) []int64 {
	ids := make([]int64, len(results))
	for i, r := range results {
		ids[i] = r.ID
	}
	return ids
}
