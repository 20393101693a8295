package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// JobInsertParams is one job to insert.
type JobInsertParams struct {
	Queue       string
	Name        string
	Payload     []byte        // valid JSON
	MaxTries    int           // 0: the worker's default
	BackoffSecs []int         // nil: the worker's default
	Timeout     time.Duration // 0: the worker's default
	Delay       time.Duration
	RetryOf     int64 // 0: none
	// LimitKey and Limit put the job under a concurrency limit: at most
	// Limit jobs of LimitKey ready or running at once (see limits.go).
	// Empty: no limit.
	LimitKey string
	Limit    int
	// Priority orders the ready jobs of a queue: lower runs first (then
	// the oldest). 0 is the default.
	Priority int
	// Tags are the job's labels (checked by the caller), nil for none.
	Tags []string
	// Metadata is free-form JSON (valid, checked by the caller), nil for
	// none.
	Metadata []byte
}

// JobInsertMany inserts jobs in one statement and returns their ids in
// order. Run it on a transaction to make the jobs exist only if it commits.
func (s *Store) JobInsertMany(ctx context.Context, db DBTX, jobs []JobInsertParams) ([]int64, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	sql, args := jobInsertStatement(jobs)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", len(jobs), err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", len(jobs), err)
	}
	return ids, nil
}

// JobInsertManyNotify is JobInsertMany on the pool with a notification for
// each of queues sent in the same round trip and the same transaction, so
// that idle workers wake as the jobs commit. The commit then takes
// PostgreSQL's notify lock: callers use it when no other notification for
// these queues is in flight.
func (s *Store) JobInsertManyNotify(ctx context.Context, jobs []JobInsertParams, queues []string) ([]int64, error) {
	if len(queues) == 0 {
		return s.JobInsertMany(ctx, s.pool, jobs)
	}
	var ids []int64
	b := &pgx.Batch{}
	sql, args := jobInsertStatement(jobs)
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		var err error
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	b.Queue(queueNotifySQL, queues)
	// A batch outside a transaction is one implicit transaction: both
	// statements commit together at its end.
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", len(jobs), err)
	}
	return ids, nil
}

const jobInsertSQL = `
	INSERT INTO queue_jobs (queue, name, payload, max_tries, backoff_secs, timeout_ms, available_at, retry_of,
	                        priority, tags, metadata)
	SELECT u.q, u.n, u.p::jsonb, NULLIF(u.t, 0), u.b::integer[], NULLIF(u.tm, 0),
	       now() + u.d * interval '1 millisecond', NULLIF(u.r, 0), u.pr, u.tg::text[], u.md::jsonb
	FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[],
	            $9::smallint[], $10::text[], $11::text[])
	     WITH ORDINALITY AS u(q, n, p, t, b, tm, d, r, pr, tg, md, ord)
	ORDER BY u.ord
	RETURNING id`

// jobInsertPlainSQL is jobInsertSQL for a batch in which no job sets a
// priority, tags or metadata: three arrays fewer to send and unnest.
const jobInsertPlainSQL = `
	INSERT INTO queue_jobs (queue, name, payload, max_tries, backoff_secs, timeout_ms, available_at, retry_of)
	SELECT u.q, u.n, u.p::jsonb, NULLIF(u.t, 0), u.b::integer[], NULLIF(u.tm, 0),
	       now() + u.d * interval '1 millisecond', NULLIF(u.r, 0)
	FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[])
	     WITH ORDINALITY AS u(q, n, p, t, b, tm, d, r, ord)
	ORDER BY u.ord
	RETURNING id`

// jobInsertStatement returns the statement inserting jobs and its
// arguments: jobInsertSQL when none of them is limited, so that unlimited
// jobs pay nothing for limits (jobInsertPlainSQL when none sets a
// priority, tags or metadata either), else jobInsertLimitedSQL for the
// whole batch (one statement, ids in order).
func jobInsertStatement(jobs []JobInsertParams) (string, []any) {
	args := jobInsertArgs(jobs)
	if !slices.ContainsFunc(jobs, func(j JobInsertParams) bool { return j.LimitKey != "" }) {
		if !slices.ContainsFunc(jobs, func(j JobInsertParams) bool {
			return j.Priority != 0 || j.Tags != nil || j.Metadata != nil
		}) {
			return jobInsertPlainSQL, args
		}
		return jobInsertSQL, append(args, jobExtraArgs(jobs)...)
	}
	args = append(args, jobExtraArgs(jobs)...)
	keys, limits := make([]string, len(jobs)), make([]int32, len(jobs))
	for i, j := range jobs {
		keys[i], limits[i] = j.LimitKey, int32(j.Limit)
	}
	return jobInsertLimitedSQL, append(args, keys, limits)
}

// jobInsertArgs are the eight arrays every insert statement takes ($1 to
// $8); jobExtraArgs the three that follow them where a statement takes
// priorities, tags and metadata ($9 to $11). Jobs that share one payload
// (the copies of one spec) share its string too: a batch of large
// payloads then costs one copy of each payload it holds.
func jobInsertArgs(jobs []JobInsertParams) []any {
	n := len(jobs)
	queues, names, payloads, backoffs := make([]string, n), make([]string, n), make([]string, n), make([]*string, n)
	tries, timeouts, delays, retryOf := make([]int32, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, j := range jobs {
		queues[i], names[i] = j.Queue, j.Name
		if i > 0 && samePayload(j.Payload, jobs[i-1].Payload) {
			payloads[i] = payloads[i-1]
		} else {
			payloads[i] = string(j.Payload)
		}
		tries[i] = int32(j.MaxTries)
		if j.BackoffSecs != nil {
			lit := intArrayLiteral(j.BackoffSecs)
			backoffs[i] = &lit
		}
		timeouts[i] = j.Timeout.Milliseconds()
		delays[i] = j.Delay.Milliseconds()
		retryOf[i] = j.RetryOf
	}
	return []any{queues, names, payloads, tries, backoffs, timeouts, delays, retryOf}
}

// samePayload reports whether a and b are the same bytes in memory (not
// merely equal), which costs no comparison of their contents.
func samePayload(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
}

func jobExtraArgs(jobs []JobInsertParams) []any {
	n := len(jobs)
	priorities, tags, metadata := make([]int16, n), make([]*string, n), make([]*string, n)
	for i, j := range jobs {
		priorities[i] = int16(j.Priority)
		if j.Tags != nil {
			lit := TextArrayLiteral(j.Tags)
			tags[i] = &lit
		}
		if j.Metadata != nil {
			md := string(j.Metadata)
			metadata[i] = &md
		}
	}
	return []any{priorities, tags, metadata}
}

// TextArrayLiteral is v as a PostgreSQL text[] literal, every element
// quoted.
func TextArrayLiteral(v []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, x := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range x {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func intArrayLiteral(v []int) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.Itoa(x)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// ClaimedJob is a job a worker now holds: the lease is (ID, Token), and
// the token is unique to the claim that took it.
type ClaimedJob struct {
	ID          int64
	Token       int64
	Queue       string
	Name        string
	Payload     []byte
	Attempt     int
	MaxTries    int           // 0: not set by the job
	BackoffSecs []int         // nil: not set by the job
	Timeout     time.Duration // 0: not set by the job
	CreatedAt   time.Time
	ReservedAt  time.Time
	// AvailableAt is when the job became ready: the claim's order within
	// a priority (see ClaimOrder).
	AvailableAt time.Time
	Priority    int
	Tags        []string // nil: none
	Metadata    []byte   // nil: none
	// Snoozes counts the attempts that ended with a snooze.
	Snoozes int
	// ClockOffset is the database clock minus this host's, measured by the
	// claim (its latest ReservedAt against the middle of the round trip,
	// so within half of it) and the same for every job of the claim: a
	// worker adds it to the times it takes from its own
	// clock, so that an attempt's history is on the database clock
	// throughout and never starts before its reservation.
	ClockOffset time.Duration
}

// Lease is the lease of the claimed job.
func (j ClaimedJob) Lease() Lease { return Lease{ID: j.ID, Token: j.Token} }

// JobClaimParams says who claims how many jobs of which queue.
type JobClaimParams struct {
	Queue  string
	Limit  int
	Worker string // the lease holder
	Master string // the holder's master; empty for a worker without one
	// Suspects claims suspects only (jobs that were in SuspectCrashes or
	// more processes that died), for an isolation process; without it a
	// claim passes them by (see crash.go).
	Suspects bool
	// After lists marks, at most one per priority: in a priority with a
	// mark the claim takes only jobs past it (see ClaimMark). Without
	// marks, or in a priority without one, it reads from the head. A
	// claim of suspects takes no marks.
	After []ClaimMark
	// MaxBytes bounds the payload bytes of the jobs claimed, together
	// (0: no bound): the claim takes its picked jobs, in the order it
	// picked them, while their payloads fit (see payloadBytesSQL); the first
	// job that does not fit ends it. With FirstAnySize its first job is
	// claimed whatever its size, so that a job larger than the bound is
	// claimed too, alone, by a worker that holds nothing else. A claim of
	// suspects, one at a time, takes no bound.
	MaxBytes     int64
	FirstAnySize bool
}

// ClaimMark is where a claim begins in one priority of a queue: a key of
// the ready index, (Priority, AvailableAt, ID), typically the last one
// the claimer took there. A claim with a mark reads the index from the
// mark on and takes only jobs after it.
//
// It is what keeps a claim's cost flat while another session holds a
// transaction open. Every job claimed leaves a dead entry at the head of
// the ready index, and every job finished a dead row; a vacuum, or the
// next scan that passes them, removes them once no transaction can see
// them. While one can (a report, a forgotten BEGIN, a replica with
// hot_standby_feedback), they stay, and a claim from the head steps over
// every entry the drain left behind: its cost grows with the jobs done
// since the hold began. From a mark it steps over the entries other
// claimers left since its own last claim only.
//
// A job can become ready behind a mark: a dispatch in a transaction that
// began before the claimed jobs' (its available_at is its transaction's
// now()), a job another claim skipped over while it held it and then
// gave back (a claim rolled back). A claimer with marks must claim from
// the head now and then (see worker's claim cursor), and such a job waits
// until it does.
type ClaimMark struct {
	Priority    int
	AvailableAt time.Time
	ID          int64
}

// MarkOf is the mark of a claimed job: a claim with it takes only jobs
// after j in the order claims take them.
func MarkOf(j ClaimedJob) ClaimMark {
	return ClaimMark{Priority: j.Priority, AvailableAt: j.AvailableAt, ID: j.ID}
}

// markArrays are the claim statements' @after_priorities, @after_at and
// @after_ids.
func markArrays(marks []ClaimMark) ([]int16, []time.Time, []int64) {
	ps, ats, ids := make([]int16, len(marks)), make([]time.Time, len(marks)), make([]int64, len(marks))
	for i, m := range marks {
		ps[i], ats[i], ids[i] = int16(m.Priority), m.AvailableAt, m.ID
	}
	return ps, ats, ids
}

// payloadBytesSQL is the size a claim counts for the payload in column
// col (see JobClaimParams.MaxBytes), as sql/claim.sql spells it: the size
// of the stored jsonb value, which is about the length of its JSON text
// for strings (larger for small numbers), read without reading the value
// itself; for a value the server compressed, the length of its JSON text,
// which costs decompressing it.
func payloadBytesSQL(col string) string {
	return "CASE WHEN pg_column_compression(" + col + ") IS NULL THEN pg_column_size(" + col + ") ELSE octet_length(" + col + "::text) END"
}

// JobClaim reserves up to Limit ready jobs of one queue, lowest priority
// first and then oldest first, skipping rows other workers are claiming,
// and counts the attempt. It returns them in that order (ClaimOrder), the
// pick's: the update visits the picked rows in an order of its own, so
// the batch is sorted once read, which costs no statement. Every
// job it takes gets the same fresh lease token (one sequence value per
// claim). Its plan is the same under a generic plan: the ready index
// (queue, priority, available_at, id) answers the pick, and the picked
// ids, as an array, are updated through the primary key (see
// sql/claim.sql).
//
// With a Master, the claim is fenced: it takes nothing unless that member's
// row is live at the statement's now() (an uncorrelated EXISTS, evaluated
// once per statement through the primary key), so a worker whose master
// stopped beating, and whose jobs are about to be released, cannot take
// more.
func (s *Store) JobClaim(ctx context.Context, p JobClaimParams) ([]ClaimedJob, error) {
	if err := s.inject(ctx, "JobClaim"); err != nil {
		return nil, fmt.Errorf("claim jobs on %q: %w", p.Queue, err)
	}
	bytes, alone := p.MaxBytes, p.FirstAnySize
	if bytes <= 0 {
		bytes, alone = math.MaxInt64, true
	}
	ps, ats, ids := markArrays(p.After)
	var sql string
	var args []any
	switch {
	case p.Suspects && p.Master == "":
		sql, args = jobClaimSuspectUnfenced.sql, []any{p.Queue, p.Limit, p.Worker}
	case p.Suspects:
		sql, args = jobClaimSuspect.sql, []any{p.Queue, p.Limit, p.Worker, p.Master}
	case p.Master == "":
		sql, args = jobClaimUnfenced.sql, []any{p.Queue, p.Limit, p.Worker, ps, ats, ids, bytes, alone}
	default:
		sql, args = jobClaim.sql, []any{p.Queue, p.Limit, p.Worker, p.Master, ps, ats, ids, bytes, alone}
	}
	sent := time.Now()
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("claim jobs on %q: %w", p.Queue, err)
	}
	defer rows.Close()
	mid := sent.Add(time.Since(sent) / 2)
	// The scan's destinations are the fields of one value, reused for
	// every row: a claim of a thousand jobs then allocates them once, not
	// once per row, which a drain at full speed feels.
	var (
		v struct {
			backoff   []int32
			maxTries  *int32
			timeoutMs *int64
			priority  int16
			snoozes   int32
			j         ClaimedJob
		}
		dest = []any{&v.j.ID, &v.j.Token, &v.j.Queue, &v.j.Name, &v.j.Payload, &v.j.Attempt, &v.maxTries,
			&v.backoff, &v.timeoutMs, &v.j.CreatedAt, &v.j.ReservedAt, &v.j.AvailableAt, &v.priority, &v.j.Tags,
			&v.j.Metadata, &v.snoozes}
		jobs = make([]ClaimedJob, 0, min(p.Limit, 128))
	)
	for rows.Next() {
		v.j, v.backoff, v.maxTries, v.timeoutMs = ClaimedJob{}, nil, nil, nil
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("claim jobs on %q: %w", p.Queue, err)
		}
		j := v.j
		j.Priority, j.Snoozes = int(v.priority), int(v.snoozes)
		if v.backoff != nil {
			j.BackoffSecs = make([]int, len(v.backoff))
			for i, b := range v.backoff {
				j.BackoffSecs[i] = int(b)
			}
		}
		if v.maxTries != nil {
			j.MaxTries = int(*v.maxTries)
		}
		if v.timeoutMs != nil {
			j.Timeout = time.Duration(*v.timeoutMs) * time.Millisecond
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim jobs on %q: %w", p.Queue, err)
	}
	// One offset for the whole claim, from its latest reservation: each
	// row's reserved_at is its own clock_timestamp(), so an offset per row
	// would shift the jobs' times against each other by up to the
	// statement's run time, and their history would not show the order
	// they started in. The latest keeps every job's start at or after its
	// own reservation.
	var last time.Time
	for _, j := range jobs {
		if j.ReservedAt.After(last) {
			last = j.ReservedAt
		}
	}
	for i := range jobs {
		jobs[i].ClockOffset = last.Sub(mid)
	}
	slices.SortFunc(jobs, ClaimOrder)
	return jobs, nil
}

// ClaimOrder orders the jobs of one queue as a claim picks them (see
// sql/ready_pick.sql): lowest priority first, then the earliest available, then
// the lowest id. It is a comparison for slices.SortFunc.
func ClaimOrder(a, b ClaimedJob) int {
	if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
		return c
	}
	if c := a.AvailableAt.Compare(b.AvailableAt); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// The claim, fenced on the holder's master (sql/claim.sql) or, for a
// holder with none, not (sql/claim_unfenced.sql); the unfenced claim takes
// the parameters of the fenced one but the master. An isolation process's
// claims of suspects are sql/claim_suspect.sql and its unfenced variant.
var (
	jobClaim                = mustStatement("claim.sql", "queue", "limit", "worker", "master", "after_priorities", "after_at", "after_ids", "bytes", "alone")
	jobClaimUnfenced        = mustStatement("claim_unfenced.sql", "queue", "limit", "worker", "after_priorities", "after_at", "after_ids", "bytes", "alone")
	jobClaimSuspect         = mustStatement("claim_suspect.sql", "queue", "limit", "worker", "master")
	jobClaimSuspectUnfenced = mustStatement("claim_suspect_unfenced.sql", "queue", "limit", "worker")
)

// Lease identifies one claim of one job: a worker holds the job while the
// row's token is still Token.
type Lease struct {
	ID    int64
	Token int64
}

// OutcomeKind says what happens to a job once its attempt is written.
type OutcomeKind string

// The kinds of outcome.
const (
	// OutcomeCompleted deletes the job.
	OutcomeCompleted OutcomeKind = "completed"
	// OutcomeRetried makes the job available again after Delay.
	OutcomeRetried OutcomeKind = "retried"
	// OutcomeFailed moves the job to queue_failed_jobs.
	OutcomeFailed OutcomeKind = "failed"
)

// JobOutcome is one finished attempt: what happens to its job, and the
// attempt's history row.
type JobOutcome struct {
	Lease
	Kind OutcomeKind
	// Status is the attempt's history status: completed, failed, timed_out,
	// snoozed or cancelled.
	Status string
	// Error is the attempt's error (retried and failed outcomes); it is
	// stored as StorableText makes it.
	Error string
	// Delay is how long a retried job waits before it is available again.
	Delay time.Duration
	// MaxTries is the number of tries that applied to a failed job.
	MaxTries int

	Queue      string
	Name       string
	Attempt    int
	ReservedAt time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	RuntimeMs  float64
	// InTx marks the outcome of an attempt whose handler completed the job
	// in its own transaction (JobCompleteTx): it applies only when that
	// transaction did not commit, so finding the lease gone is expected.
	InTx bool
}

// JobFinishParams is a batch of finished attempts of one worker.
type JobFinishParams struct {
	Worker   string
	Master   string // empty for a worker without one
	Outcomes []JobOutcome
}

// JobFinishResult says which attempts were written. An attempt whose lease
// the worker no longer held (its job was released and maybe claimed again)
// changes nothing, writes no history and counts nowhere; it is listed in
// Lost.
type JobFinishResult struct {
	Written int
	Lost    []Lease
}

// The finish statement writes a batch of outcomes in one statement:
// completed jobs are deleted, retried ones released until their delay has
// passed, failed ones moved to queue_failed_jobs; snoozed ones are
// released like retried ones with their attempt taken back and their
// snooze counted, cancelled ones deleted like completed ones (see
// cancel.go); a job an operator asked to cancel while it ran is deleted
// and recorded as cancelled rather than retried or snoozed, so it never
// runs again. History rows and counters are made from the rows the
// statement actually changed, so an attempt whose lease was lost is
// recorded nowhere. A limited job's slot is freed by each outcome and
// handed over in the same statement.
//
// sql/finish.sql handles every kind; sql/finish_ends.sql only the kinds
// that end a job (completed, cancelled, failed), without the CTEs that
// release a retried or snoozed job and look for a cancel request under its
// row lock first, which a batch of ends would run for nothing (they cost
// about 4 % of a drain's throughput). Both take the same parameters, in
// the order finishOn passes them; TestFinishStatements checks them.
var (
	jobFinish     = mustStatement("finish.sql", finishParams...)
	jobFinishEnds = mustStatement("finish_ends.sql", finishParams...)
)

// finishParams are the parameters of both finish statements: an array per
// attempt field, then the writer's master and worker, then its shard base
// (the counters and the runtime histogram are bumped on one of the 16
// shards from @shard_base that no other writing transaction holds: see
// queue_counter_shard).
var finishParams = []string{"job_ids", "leases", "kinds", "statuses", "delays_ms", "errors", "tries",
	"queues", "names", "attempts", "reserved", "started", "finished", "runtimes_ms",
	"master", "worker", "shard_base"}

// Shard bases of a finish statement (@shard_base): the outcome writers
// count on shards 0 to 15, and a job completed in a handler's transaction
// on 16 to 31, since that transaction holds its counter row until it
// commits and must not make the outcome writers of other workers wait for
// that (each range has its own locks in queue_counter_shard, so neither
// takes a shard from the other).
const (
	writerShards   = 0
	completeShards = 16
)

// JobFinishMany writes a batch of finished attempts in one round trip (see
// jobFinish). Only attempts whose lease the worker still holds count.
func (s *Store) JobFinishMany(ctx context.Context, p JobFinishParams) (JobFinishResult, error) {
	if len(p.Outcomes) == 0 {
		return JobFinishResult{}, nil
	}
	if err := s.inject(ctx, "JobFinishMany"); err != nil {
		return JobFinishResult{}, fmt.Errorf("write %d finished jobs: %w", len(p.Outcomes), err)
	}
	st := jobFinishEnds
	for _, o := range p.Outcomes {
		if o.Kind == OutcomeRetried || o.Kind == OutcomeSnoozed {
			st = jobFinish
			break
		}
	}
	res, handed, err := finishOn(ctx, s.pool, st, writerShards, p)
	if err != nil {
		return res, err
	}
	s.wakeHanded(ctx, handed)
	if err := s.injectAfter(ctx, "JobFinishMany"); err != nil {
		return JobFinishResult{}, fmt.Errorf("write %d finished jobs: %w", len(p.Outcomes), err)
	}
	return res, nil
}

// JobCompleteTx completes one held job inside the caller's transaction, as
// the last statement before its commit: the job's row is deleted and its
// history row and counters written together with the caller's own writes,
// or not at all. When the lease is no longer held (the job was released,
// and may run elsewhere) it changes nothing, makes tx fail so that the
// caller's writes cannot commit either, and returns ErrLeaseLost.
func (s *Store) JobCompleteTx(ctx context.Context, tx pgx.Tx, worker, master string, o JobOutcome) error {
	o.Kind, o.Status, o.Error = OutcomeCompleted, "completed", ""
	res, handed, err := finishOn(ctx, tx, jobFinishEnds, completeShards, JobFinishParams{Worker: worker, Master: master, Outcomes: []JobOutcome{o}})
	if err != nil {
		return err
	}
	if res.Written == 1 {
		// A parked job given this job's slot becomes ready at the commit;
		// its workers are woken then too.
		return QueueNotifyTx(ctx, tx, handed)
	}
	// Abort the transaction: a commit after this rolls back.
	_, err = tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'fleet: lease of the job lost; this transaction cannot commit'; END $$`)
	return errors.Join(fmt.Errorf("complete job %d: %w", o.ID, ErrLeaseLost), err)
}

// ErrLeaseLost says the caller no longer holds a job's lease: the job was
// released (its holder was presumed gone) and may run elsewhere.
var ErrLeaseLost = errors.New("the lease of the job was lost: it was released and may run elsewhere")

// finishOn runs a finish statement (jobFinish or jobFinishEnds) on db,
// counting on the 16 shards from shards. It also returns the queues of
// parked jobs the statement handed a concurrency slot to (see
// limitHandoff), for the caller to wake.
func finishOn(ctx context.Context, db DBTX, st statement, shards int, p JobFinishParams) (JobFinishResult, []string, error) {
	var res JobFinishResult
	n := len(p.Outcomes)
	ids, leases, attempts, tries := make([]int64, n), make([]int64, n), make([]int32, n), make([]int32, n)
	kinds, statuses, errs, queues, names := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	delays, runtimes := make([]int64, n), make([]float64, n)
	reserved, started, finished := make([]*time.Time, n), make([]time.Time, n), make([]time.Time, n)
	for i, o := range p.Outcomes {
		ids[i], leases[i], attempts[i], tries[i] = o.ID, o.Token, int32(o.Attempt), int32(o.MaxTries)
		kinds[i], statuses[i], errs[i] = string(o.Kind), o.Status, StorableText(o.Error)
		queues[i], names[i] = o.Queue, o.Name
		delays[i], runtimes[i] = o.Delay.Milliseconds(), o.RuntimeMs
		if !o.ReservedAt.IsZero() {
			t := o.ReservedAt
			reserved[i] = &t
		}
		started[i], finished[i] = o.StartedAt, o.FinishedAt
	}
	// In the order of finishParams.
	rows, err := db.Query(ctx, st.sql, ids, leases, kinds, statuses, delays, errs, tries,
		queues, names, attempts, reserved, started, finished, runtimes, p.Master, p.Worker, shards)
	if err != nil {
		return res, nil, fmt.Errorf("write %d finished jobs: %w", n, err)
	}
	var handed []string
	written, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Lease, error) {
		var l Lease
		var queues []string
		err := row.Scan(&l.ID, &l.Token, &queues)
		if queues != nil {
			handed = queues
		}
		return l, err
	})
	if err != nil {
		return res, nil, fmt.Errorf("write %d finished jobs: %w", n, err)
	}
	seen := make(map[Lease]bool, len(written))
	for _, l := range written {
		seen[l] = true
	}
	for _, o := range p.Outcomes {
		if seen[o.Lease] {
			res.Written++
		} else {
			res.Lost = append(res.Lost, o.Lease)
		}
	}
	return res, handed, nil
}

// MaxStorableText is the most bytes of an error message fleet stores.
const MaxStorableText = 16 << 10

// StorableText returns s as PostgreSQL can store it in a text column:
// invalid UTF-8 and NUL bytes (which text cannot hold) become U+FFFD, and
// text longer than MaxStorableText bytes is cut at a character boundary
// and marked as cut.
func StorableText(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= MaxStorableText {
		return s
	}
	const mark = " …[truncated]"
	cut := MaxStorableText - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// JobReleaseParams gives jobs back to the queue.
type JobReleaseParams struct {
	Leases []Lease
	// Uncount takes the attempt back: the job never started, or was stopped
	// through no fault of its own.
	Uncount bool
	Error   string
}

// JobRelease makes held jobs available again at once. Jobs whose lease is
// no longer the caller's are left alone. A job with a cancel request is not
// given back but ends as cancelled (see sql/release.sql). It returns how many
// jobs left the caller's hands.
func (s *Store) JobRelease(ctx context.Context, p JobReleaseParams) (int, error) {
	if len(p.Leases) == 0 {
		return 0, nil
	}
	if err := s.inject(ctx, "JobRelease"); err != nil {
		return 0, fmt.Errorf("release %d jobs: %w", len(p.Leases), err)
	}
	ids, tokens := leaseArrays(p.Leases)
	var released, cancelled int
	var handed []string
	err := s.pool.QueryRow(ctx, jobRelease.sql, ids, tokens, p.Uncount, StorableText(p.Error)).Scan(&released, &cancelled, &handed)
	if err != nil {
		return 0, fmt.Errorf("release %d jobs: %w", len(p.Leases), err)
	}
	s.wakeHanded(ctx, handed)
	if err := s.injectAfter(ctx, "JobRelease"); err != nil {
		return 0, fmt.Errorf("release %d jobs: %w", len(p.Leases), err)
	}
	return released + cancelled, nil
}

// jobRelease releases held jobs (sql/release.sql).
var jobRelease = mustStatement("release.sql", "job_ids", "leases", "uncount", "error")

func leaseArrays(leases []Lease) ([]int64, []int64) {
	ids, tokens := make([]int64, len(leases)), make([]int64, len(leases))
	for i, l := range leases {
		ids[i], tokens[i] = l.ID, l.Token
	}
	return ids, tokens
}

// JobReadyExists reports whether any of queues has a job ready to run now
// (sql/ready_exists.sql).
var jobReadyExists = mustStatement("ready_exists.sql", "queues")

func (s *Store) JobReadyExists(ctx context.Context, queues []string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, jobReadyExists.sql, queues).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look for ready jobs: %w", err)
	}
	return ok, nil
}

// jobSuspectReadyExists is JobSuspectReadyExists's statement.
var jobSuspectReadyExists = mustStatement("ready_suspect_exists.sql", "queues")

// JobSuspectReadyExists reports whether any of queues has a suspect ready
// to run now, for an isolation process (sql/ready_suspect_exists.sql).
func (s *Store) JobSuspectReadyExists(ctx context.Context, queues []string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, jobSuspectReadyExists.sql, queues).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look for ready suspect jobs: %w", err)
	}
	return ok, nil
}

// NextJob is what JobNext found.
type NextJob struct {
	// Any says whether any unreserved job exists; In is how long until
	// the first of them is available (0: one is ready now).
	Any bool
	In  time.Duration
	// Live says whether the member row of the master asked about was live
	// at the statement's now() (true when none was asked about): a worker
	// that is not live is fenced from claiming.
	Live bool
}

// JobNext finds, in one statement, how long until the next job of queues
// is available and whether master's member row is live. Parked jobs
// (waiting on a concurrency limit) are not counted: a handoff or the sweep
// makes them available, and notifies.
// The look for work of a worker with a master (sql/next.sql) and of one
// without (sql/next_unfenced.sql).
var (
	jobNext         = mustStatement("next.sql", "queues", "master", "after_keys", "after_at", "after_ids")
	jobNextUnfenced = mustStatement("next_unfenced.sql", "queues", "after_keys", "after_at", "after_ids")
)

func (s *Store) JobNext(ctx context.Context, queues []string, master string) (NextJob, error) {
	return s.JobNextAfter(ctx, queues, master, nil)
}

// JobNextAfter is JobNext reading each queue of after only past its marks,
// as a claim with them does (see ClaimMark): it steps over no dead entry
// before a mark, and does not see a job that became ready behind one.
func (s *Store) JobNextAfter(ctx context.Context, queues []string, master string, after map[string][]ClaimMark) (NextJob, error) {
	var ms *float64
	var out NextJob
	var keys []string
	var ats []time.Time
	var ids []int64
	for q, marks := range after {
		for _, m := range marks {
			keys = append(keys, q+","+strconv.Itoa(m.Priority))
			ats, ids = append(ats, m.AvailableAt), append(ids, m.ID)
		}
	}
	// A worker without a master (tests) is always live: its statement has
	// no liveness condition rather than a catch-all one.
	sql, args := jobNextUnfenced.sql, []any{queues, keys, ats, ids}
	if master != "" {
		sql, args = jobNext.sql, []any{queues, master, keys, ats, ids}
	}
	err := s.pool.QueryRow(ctx, sql, args...).Scan(&ms, &out.Live)
	if err != nil {
		return out, fmt.Errorf("find next available job: %w", err)
	}
	if ms != nil { // nil: no job at all (GREATEST would have made that 0)
		out.Any, out.In = true, time.Duration(max(*ms, 0)*float64(time.Millisecond))
	}
	return out, nil
}
