package master_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// onClock returns a store on pool whose clock stands 10 s into minute m0
// (see store.Store.WithClock), and that clock: the snapshots and duties of
// a master on it see that minute in progress, however long the test takes,
// until the test moves the clock.
func onClock(pool *pgxpool.Pool, m0 time.Time) (*store.Store, *master.TestClock) {
	clock := master.NewTestClock(m0.Add(10 * time.Second))
	return store.New(pool).WithClock(clock.Now), clock
}

// lastMinute is the minute before the one the database's clock is in: a
// test's minutes that a master started now did not watch.
func lastMinute(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var m time.Time
	if err := pool.QueryRow(t.Context(), `SELECT date_trunc('minute', now()) - interval '1 minute'`).Scan(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// tablesCreated sets when the fleet tables count as created.
func tablesCreated(t *testing.T, pool *pgxpool.Pool, at time.Time) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `UPDATE fleet_state SET updated_at = $1 WHERE key = 'tables:created'`, at); err != nil {
		t.Fatal(err)
	}
}

// TestStoppingMastersWriteTheirMinute: two masters stopped within the
// minute they ran in leave its attempts counted (a partial snapshot of
// it), not a minute with nothing.
func TestStoppingMastersWriteTheirMinute(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	m0 := lastMinute(t, pool)
	st, _ := onClock(pool, m0)
	tablesCreated(t, pool, m0.Add(-time.Hour))
	one := startOn(t, st, resolve(t, nil), nil, func(s *master.Settings) { s.Name = "one" })
	two := startOn(t, st, resolve(t, nil), nil, func(s *master.Settings) { s.Name = "two" })
	// 700 attempts finished during the masters' run, in this minute.
	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT g, 'mail', 'send', 1, 'completed', ts, ts, 20
		FROM generate_series(1, 700) g, LATERAL (SELECT $1::timestamptz + g * interval '1 millisecond' AS ts) x`, m0); err != nil {
		t.Fatal(err)
	}
	one.stop(t)
	two.stop(t)
	if n := one.count(t, `SELECT count(*) FROM fleet_metrics WHERE taken_at = $1 AND kind = 'queue' AND subject = 'mail'
		AND jobs = 700 AND backlog_seen`, m0); n != 1 {
		t.Fatalf("no snapshot of the minute the masters stopped in with its 700 attempts (%d rows)", n)
	}
}

// TestCatchUpWritesNoGhosts: a master started after minutes nobody watched
// writes their attempts, marked as not having seen their backlog; writes
// nothing for a minute with no attempt, though a queue has a backlog now;
// and nothing for a minute that ended before the fleet tables existed.
func TestCatchUpWritesNoGhosts(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	// The master starts after the minutes on its clock: it watched none.
	m0 := lastMinute(t, pool)
	st, _ := onClock(pool, m0)
	// The tables came 30 s into minute M-4: M-5 is before them.
	tablesCreated(t, pool, m0.Add(-4*time.Minute+30*time.Second))
	// Attempts in M-5 (before the tables) and M-3; a backlog now.
	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT k * 100 + g, 'mail', 'send', 1, 'completed', ts, ts, 20
		FROM unnest(ARRAY[3, 5]) k, generate_series(1, 10) g,
		     LATERAL (SELECT $1::timestamptz - k * interval '1 minute' + g * interval '1 second' AS ts) x`, m0); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name, available_at)
		SELECT 'mail', 'send', $1 FROM generate_series(1, 50)`, m0); err != nil {
		t.Fatal(err)
	}
	b := startOn(t, st, resolve(t, nil), nil)
	poll(t, "the five minutes before the master caught up", func() bool {
		return b.count(t, `SELECT count(*) FROM fleet_duties WHERE duty = 'metrics' AND done_at IS NOT NULL
			AND period >= $1::timestamptz - interval '5 minutes' AND period < $1`, m0) == 5
	})
	type row struct {
		minutesBack    int
		kind, subject  string
		jobs, pending  int
		seen, coverage bool
	}
	rows, err := pool.Query(ctx, `SELECT round(EXTRACT(EPOCH FROM $1 - taken_at) / 60)::int, kind, subject, jobs::int, pending::int,
		backlog_seen, covered_until IS NOT NULL FROM fleet_metrics WHERE taken_at < $1 ORDER BY taken_at, kind, subject`, m0)
	if err != nil {
		t.Fatal(err)
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.minutesBack, &r.kind, &r.subject, &r.jobs, &r.pending, &r.seen, &r.coverage); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []row{{3, "job", "send", 10, 0, false, false}, {3, "queue", "mail", 10, 0, false, false}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("caught-up rows %+v, want M-3's attempts only, without a backlog: %+v", got, want)
	}
}
