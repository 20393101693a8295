package master_test

import (
	"testing"
	"time"

	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/pgtest"
)

func TestMastersSnapshotEachMinuteOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	// The masters snapshot the five minutes before the current one (less
	// its settle time) on their store's clock, which stands 10 s into m0
	// until the test moves it: the window cannot move on while they work.
	m0 := lastMinute(t, pool)
	st, clock := onClock(pool, m0)
	tablesCreated(t, pool, m0.Add(-time.Hour))
	// Minute M-k has 10*k attempts, k = 1..5.
	if _, err := pool.Exec(ctx, `
		INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		SELECT k * 100 + g, 'mail', 'send', 1, 'completed', ts, ts, 20
		FROM generate_series(1, 5) k, generate_series(1, 10 * k) g,
		     LATERAL (SELECT $1::timestamptz - k * interval '1 minute' + g * interval '1 second' AS ts) x`, m0); err != nil {
		t.Fatal(err)
	}
	// A master died mid-snapshot of M-3: its lease runs 2 more seconds.
	if _, err := pool.Exec(ctx, `INSERT INTO fleet_duties (duty, period, holder, lease_until)
		VALUES ('metrics', $1::timestamptz - interval '3 minutes', 'dead', $2)`, m0, clock.Now().Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	b := startOn(t, st, resolve(t, nil), nil, func(s *master.Settings) { s.Name = "one" })
	other := startOn(t, st, resolve(t, nil), nil, func(s *master.Settings) { s.Name = "two" })
	poll(t, "the four snapshots of the minutes nobody holds", func() bool {
		return b.count(t, `SELECT count(*) FROM fleet_metrics WHERE kind = 'queue' AND subject = 'mail'
			AND taken_at >= $1::timestamptz - interval '5 minutes' AND taken_at < $1 AND jobs = round(EXTRACT(EPOCH FROM $1 - taken_at) / 6)`, m0) == 4
	})
	// Within its lease the dead holder keeps M-3; once it has passed, a
	// master takes the minute over.
	b.sig.DutiesRound.WaitFresh(t, 5)
	if n := b.count(t, `SELECT count(*) FROM fleet_metrics WHERE taken_at = $1::timestamptz - interval '3 minutes'`, m0); n != 0 {
		t.Fatalf("M-3 written within the dead holder's lease (%d rows)", n)
	}
	clock.Advance(3 * time.Second)
	poll(t, "the five snapshots", func() bool {
		return b.count(t, `SELECT count(*) FROM fleet_metrics WHERE kind = 'queue' AND subject = 'mail'
			AND taken_at >= $1::timestamptz - interval '5 minutes' AND taken_at < $1 AND jobs = round(EXTRACT(EPOCH FROM $1 - taken_at) / 6)`, m0) == 5
	})
	// 25 more duty rounds of each: no minute is written twice.
	b.sig.DutiesRound.WaitFresh(t, 25)
	other.sig.DutiesRound.WaitFresh(t, 25)
	if n := b.count(t, `SELECT count(*) FROM fleet_metrics WHERE kind = 'queue' AND subject = 'mail' AND taken_at < $1`, m0); n != 5 {
		t.Fatalf("%d snapshot rows", n)
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_duties WHERE duty = 'metrics' AND period = $1::timestamptz - interval '3 minutes' AND tries = 2 AND holder <> 'dead' AND done_at IS NOT NULL`, m0); n != 1 {
		t.Fatal("the dead holder's minute was not taken over")
	}
	if n := b.count(t, `SELECT count(*) FROM fleet_duties WHERE duty = 'partitions' AND done_at IS NOT NULL`); n != 1 {
		t.Fatal("no upkeep")
	}
	t.Log(b.count(t, `SELECT count(*) FROM fleet_duties WHERE duty = 'metrics' AND done_at IS NOT NULL`))
}
