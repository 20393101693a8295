package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// ScrapeRuntimeNames is how many job names of a queue the runtime
// histogram shows by name, those with the most attempts; the others are
// summed under ScrapeRuntimeOther.
const ScrapeRuntimeNames = 20

// ScrapeRuntimeOther is the name the runtime histogram gives the job names
// of a queue beyond its ScrapeRuntimeNames busiest.
const ScrapeRuntimeOther = "other"

// Scrape is everything the fleet_* gauges show, read in one statement.
type Scrape struct {
	// Queues holds every queue that has jobs or a counters row, by name; a
	// drained queue reports zeros.
	Queues []ScrapeQueue `json:"queues"`
	// Masters counts the live masters (not expired) by state.
	Masters map[string]int `json:"masters"`
	// Processes holds the worker processes of each supervisor and group,
	// summed over the live masters, by supervisor then group.
	Processes []ScrapeProcesses `json:"processes"`
	// PausedAll says every supervisor is paused (key StatePauseAll).
	PausedAll bool `json:"paused_all"`
	// PausedSupervisors and PausedQueues name the supervisors and queues
	// paused one by one, sorted.
	PausedSupervisors []string `json:"paused_supervisors"`
	PausedQueues      []string `json:"paused_queues"`
	// Counters holds the rows of fleet_counters, by queue.
	Counters []ScrapeCounter `json:"counters"`
	// Runtimes holds the runtime histogram buckets that have attempts, by
	// queue, job name (the ScrapeRuntimeNames busiest of the queue, the
	// others as ScrapeRuntimeOther) and bucket. Lost attempts are not in
	// it: no worker timed them.
	Runtimes []ScrapeRuntime `json:"runtimes"`
	// Exporter says the read holds the fleet-wide families: always for
	// ScrapeRead, and for ScrapeReadAs when the caller holds the exporter
	// lease. When it is false, every fleet-wide field above is empty.
	Exporter bool `json:"exporter"`
	// Own holds the worker processes of the caller's own master row (by
	// supervisor then group); only ScrapeReadAs fills it.
	Own []ScrapeProcesses `json:"own"`
	// HeldOldestSecs is how long the oldest session holding back the
	// cleanup of dead rows has held it (see CleanupHolder), 0 with none.
	HeldOldestSecs float64 `json:"held_oldest_secs"`
	// Held lists the sessions that have held it back for at least
	// ScrapeAs.HeldAfter, the oldest first, at most ScrapeHeldShown (none
	// without a HeldAfter).
	Held []ScrapeHeld `json:"held"`
}

// ScrapeHeldShown is the most sessions holding back cleanup a scrape
// lists.
const ScrapeHeldShown = 5

// ScrapeHeld is a session holding back the cleanup of dead rows, as a
// scrape shows it: no statement text, which a metric does not carry.
type ScrapeHeld struct {
	PID             int     `json:"pid"`
	ApplicationName string  `json:"application_name"`
	AgeSecs         float64 `json:"age_secs"`
}

// StateExporter is the fleet_state key of the exporter lease: the master
// whose /metrics carries the fleet-wide families. Its value names the
// holder's instance; updated_at is the last renewal.
const StateExporter = "metrics:exporter"

// ScrapeAs says who reads: a master instance taking part in the exporter
// lease.
type ScrapeAs struct {
	// Instance is the reading master's instance id.
	Instance string
	// Lease is how long a holder keeps the exporter role without renewing
	// it; each read by the holder renews it.
	Lease time.Duration
	// HeldAfter, when positive, lists in Scrape.Held the sessions that
	// have held back cleanup for that long.
	HeldAfter time.Duration
}

// ScrapeQueue is how many jobs of one queue are pending (ready now), delayed
// (available later) and reserved (held by a worker), and how long the oldest
// ready job has waited since it became available (0 with none).
type ScrapeQueue struct {
	Queue          string  `json:"queue"`
	Pending        int64   `json:"pending"`
	Delayed        int64   `json:"delayed"`
	Reserved       int64   `json:"reserved"`
	Limited        int64   `json:"limited"` // parked on a concurrency limit
	OldestWaitSecs float64 `json:"oldest_wait_secs"`
}

// ScrapeProcesses is how many worker processes one group of a supervisor
// runs over every live master. Group is a queue name, or "a,b" for a group
// working several queues.
type ScrapeProcesses struct {
	Supervisor string `json:"supervisor"`
	Group      string `json:"group"`
	Processes  int    `json:"processes"`
}

// ScrapeCounter is the sum of a queue's rows of fleet_counters since the
// counters began: its attempts processed and failed (failed, timed out or
// lost), its attempts by outcome, and its jobs by what became of them
// (Completed and Cancelled count both: such an attempt ends its job).
type ScrapeCounter struct {
	Queue     string `json:"queue"`
	Processed int64  `json:"processed"`
	Failed    int64  `json:"failed"`

	Completed     int64 `json:"completed"`      // attempts completed, and so jobs
	AttemptFailed int64 `json:"attempt_failed"` // attempts that failed with an error
	TimedOut      int64 `json:"timed_out"`      // attempts that timed out
	Lost          int64 `json:"lost"`           // attempts whose worker died
	Cancelled     int64 `json:"cancelled"`      // attempts cancelled, and so jobs
	Retried       int64 `json:"retried"`        // jobs released to run again after a failed or timed out attempt
	FailedFinal   int64 `json:"failed_final"`   // jobs moved to failed jobs, their tries spent
	Requeued      int64 `json:"requeued"`       // jobs released to run again after a lost attempt
	// Interrupted counts attempts its worker stopped as it exited (their
	// handlers did not finish within the grace period after another job
	// ignored its timeout), and so jobs released to run again with no try
	// spent.
	Interrupted int64 `json:"interrupted"`
}

// ScrapeRuntime is one bucket of the runtime histogram of a queue's job
// name (fleet_runtime_counters summed over its shards): how many attempts
// took at most store.RuntimeBoundsMs[Bucket] (more than the last bound when
// Bucket is len(RuntimeBoundsMs)) and more than the bound before, and their
// summed runtime.
type ScrapeRuntime struct {
	Queue  string  `json:"queue"`
	Name   string  `json:"name"`
	Bucket int     `json:"bucket"`
	N      int64   `json:"n"`
	SumMs  float64 `json:"sum_ms"`
}

// scrapeSQL builds the whole scrape as one json document.
//
// Job counts come from queueCountsCTE: the trigger-maintained
// queue_counts, not a scan of queue_jobs, ready and delayed told apart and
// the oldest wait measured on the store's clock ($9, see clockSQL); runtimes come from
// fleet_runtime_counters, never from the history in fleet_jobs. A malformed supervisors document (not an
// array, processes not an object, a count not a number) is skipped rather
// than failing the scrape.
var scrapeSQL = `
	WITH ex AS (
		INSERT INTO fleet_state AS s (key, value, updated_at)
		SELECT $6::text, jsonb_build_object('holder', $5::text), now() WHERE $5::text <> ''
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()
		WHERE s.value->>'holder' = $5::text OR s.updated_at <= now() - $7 * interval '1 millisecond'
		RETURNING true AS held
	), flag AS (
		SELECT $5::text = '' OR EXISTS (SELECT 1 FROM ex) AS exporting
	), ` + queueCountsCTE(clockSQL(9)) + `, ready AS (
		SELECT queue, pending, delayed, limited, oldest FROM qcounts
	), reserved AS (
		SELECT queue, reserved FROM qcounts
	), counters AS (
		SELECT queue, sum(processed)::bigint AS processed, sum(failed)::bigint AS failed,
		       sum(completed)::bigint AS completed, sum(attempt_failed)::bigint AS attempt_failed,
		       sum(timed_out)::bigint AS timed_out, sum(lost)::bigint AS lost, sum(cancelled)::bigint AS cancelled,
		       sum(retried)::bigint AS retried, sum(failed_final)::bigint AS failed_final,
		       sum(requeued)::bigint AS requeued, sum(interrupted)::bigint AS interrupted
		FROM fleet_counters GROUP BY queue
	), members AS (
		SELECT CASE WHEN expires_at < now() THEN 'offline' WHEN state = 'draining' THEN 'draining' ELSE 'online' END AS state,
		       report->'supervisors' AS supervisors, expires_at >= now() AS live
		FROM fleet_masters WHERE kind = 'master'
	), live AS (
		SELECT state, supervisors FROM members WHERE live
	), runtime_per AS (
		SELECT queue, name, bucket, sum(n) AS n, sum(sum_ms) AS sum_ms
		FROM fleet_runtime_counters GROUP BY queue, name, bucket
	)
	SELECT json_build_object(
		'queues', CASE WHEN (SELECT exporting FROM flag) THEN (
			SELECT COALESCE(json_agg(json_build_object(
				'queue', n.queue,
				'pending', COALESCE(r.pending, 0),
				'delayed', COALESCE(r.delayed, 0),
				'reserved', COALESCE(x.reserved, 0),
				'limited', COALESCE(r.limited, 0),
				'oldest_wait_secs', COALESCE(EXTRACT(EPOCH FROM ` + clockSQL(9) + ` - r.oldest)::float8, 0)
			) ORDER BY n.queue), '[]')
			FROM (SELECT queue FROM ready UNION SELECT queue FROM reserved
			      UNION SELECT queue FROM counters) n
			LEFT JOIN ready r ON r.queue = n.queue
			LEFT JOIN reserved x ON x.queue = n.queue) ELSE '[]' END,
		'masters', CASE WHEN (SELECT exporting FROM flag) THEN (
			SELECT COALESCE(json_object_agg(state, n), '{}')
			FROM (SELECT state, count(*) AS n FROM members GROUP BY state) m) ELSE '{}' END,
		'processes', CASE WHEN (SELECT exporting FROM flag) THEN (
			SELECT COALESCE(json_agg(json_build_object(
				'supervisor', supervisor, 'group', grp, 'processes', n
			) ORDER BY supervisor, grp), '[]')
			FROM (
				SELECT s.value->>'name' AS supervisor, p.key AS grp,
				       sum((p.value)::numeric)::bigint AS n
				FROM live m
				CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(m.supervisors) = 'array'
					THEN m.supervisors ELSE '[]' END) s
				CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(s.value->'processes') = 'object'
					THEN s.value->'processes' ELSE '{}' END) p
				WHERE jsonb_typeof(p.value) = 'number' AND s.value->>'name' IS NOT NULL
				GROUP BY 1, 2) t) ELSE '[]' END,
		'own', (
			SELECT COALESCE(json_agg(json_build_object(
				'supervisor', s.value->>'name', 'group', p.key, 'processes', (p.value)::numeric::bigint
			) ORDER BY s.value->>'name', p.key), '[]')
			FROM fleet_masters m
			CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(m.report->'supervisors') = 'array'
				THEN m.report->'supervisors' ELSE '[]' END) s
			CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(s.value->'processes') = 'object'
				THEN s.value->'processes' ELSE '{}' END) p
			WHERE m.instance = $5::text AND jsonb_typeof(p.value) = 'number' AND s.value->>'name' IS NOT NULL),
		'exporter', (SELECT exporting FROM flag),
		'paused_all', (SELECT exporting FROM flag) AND EXISTS (SELECT 1 FROM fleet_state WHERE key = $1::text),
		'paused_supervisors', CASE WHEN (SELECT exporting FROM flag) THEN (
			SELECT COALESCE(json_agg(substr(key, length($2::text) + 1) ORDER BY key), '[]')
			FROM fleet_state WHERE starts_with(key, $2::text)) ELSE '[]' END,
		'paused_queues', CASE WHEN (SELECT exporting FROM flag) THEN (
			SELECT COALESCE(json_agg(substr(key, length($3::text) + 1) ORDER BY key), '[]')
			FROM fleet_state WHERE starts_with(key, $3::text)) ELSE '[]' END,
		'counters', CASE WHEN (SELECT exporting FROM flag) THEN (
			SELECT COALESCE(json_agg(json_build_object(
				'queue', queue, 'processed', processed, 'failed', failed,
				'completed', completed, 'attempt_failed', attempt_failed, 'timed_out', timed_out, 'lost', lost,
				'cancelled', cancelled, 'retried', retried, 'failed_final', failed_final, 'requeued', requeued,
				'interrupted', interrupted
			) ORDER BY queue), '[]')
			FROM counters) ELSE '[]' END,
		'runtimes', CASE WHEN (SELECT exporting FROM flag) THEN (
			SELECT COALESCE(json_agg(json_build_object(
				'queue', queue, 'name', name, 'bucket', bucket, 'n', n, 'sum_ms', sum_ms
			) ORDER BY queue, name, bucket), '[]')
			FROM (
				SELECT p.queue, CASE WHEN t.rank <= $4 THEN p.name ELSE $8::text END AS name, p.bucket,
				       sum(p.n)::bigint AS n, sum(p.sum_ms)::float8 AS sum_ms
				FROM runtime_per p
				JOIN (SELECT queue, name, row_number() OVER (PARTITION BY queue ORDER BY sum(n) DESC, name) AS rank
				      FROM runtime_per GROUP BY queue, name) t ON t.queue = p.queue AND t.name = p.name
				GROUP BY 1, 2, 3) b) ELSE '[]' END,
		'held_oldest_secs', CASE WHEN (SELECT exporting FROM flag) THEN (
			SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(since))::float8, 0) FROM ` + heldSessions + `) ELSE 0 END,
		'held', CASE WHEN (SELECT exporting FROM flag) AND $10 > 0 THEN (
			SELECT COALESCE(json_agg(json_build_object(
				'pid', pid, 'application_name', COALESCE(application_name, ''), 'age_secs', EXTRACT(EPOCH FROM now() - since)::float8
			) ORDER BY since, pid), '[]')
			FROM (SELECT * FROM ` + heldSessions + ` WHERE since <= now() - $10 * interval '1 millisecond'
			      ORDER BY since, pid LIMIT ` + strconv.Itoa(ScrapeHeldShown) + `) x) ELSE '[]' END
	)`

// ScrapeRead reads everything the fleet_* gauges show in one statement (one
// round trip), taking the oldest waits from the store's clock (see
// WithClock) and every other age from the database clock.
func (s *Store) ScrapeRead(ctx context.Context) (Scrape, error) {
	return s.scrapeRead(ctx, ScrapeAs{})
}

// ScrapeReadAs is ScrapeRead for one master of several, in one statement:
// it takes or renews the exporter lease (StateExporter) for as.Instance
// when the lease is free, held by as.Instance already, or not renewed
// within as.Lease, and reads the fleet-wide fields only when it holds it
// (Exporter). Of masters reading at the same moment of the database clock
// exactly one holds the lease, so the fleet-wide families appear on one
// master's /metrics. Own always holds the master's own processes.
func (s *Store) ScrapeReadAs(ctx context.Context, as ScrapeAs) (Scrape, error) {
	if as.Instance == "" || as.Lease <= 0 {
		return Scrape{}, fmt.Errorf("read scrape as %q: an instance and a positive lease are needed", as.Instance)
	}
	return s.scrapeRead(ctx, as)
}

// ScrapeReadWith is ScrapeRead with the options of as: ScrapeReadAs's
// when as.Instance is set, and the sessions holding back cleanup past
// as.HeldAfter listed.
func (s *Store) ScrapeReadWith(ctx context.Context, as ScrapeAs) (Scrape, error) {
	if as.Instance != "" {
		return s.ScrapeReadAs(ctx, as)
	}
	return s.scrapeRead(ctx, as)
}

// ScrapeRelease gives up the exporter lease if instance holds it, so that
// the next master to read takes it at once rather than after the lease.
func (s *Store) ScrapeRelease(ctx context.Context, instance string) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE fleet_state SET updated_at = '-infinity'
		WHERE key = $1 AND value->>'holder' = $2`, StateExporter, instance)
	if err != nil {
		return fmt.Errorf("release the exporter lease of %s: %w", instance, err)
	}
	return nil
}

func (s *Store) scrapeRead(ctx context.Context, as ScrapeAs) (Scrape, error) {
	var doc []byte
	// It expands every master's report: JIT off (see queryNoJIT).
	err := s.queryRowNoJIT(ctx, []any{&doc}, scrapeSQL, StatePauseAll, StatePauseSupervisorPrefix, StatePauseQueuePrefix,
		ScrapeRuntimeNames, as.Instance, StateExporter, as.Lease.Milliseconds(), ScrapeRuntimeOther, s.at(),
		as.HeldAfter.Milliseconds())
	if err != nil {
		return Scrape{}, fmt.Errorf("read scrape: %w", err)
	}
	var out Scrape
	if err := json.Unmarshal(doc, &out); err != nil {
		return Scrape{}, fmt.Errorf("decode scrape: %w", err)
	}
	return out, nil
}
