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
	// its settle time). Should that window move on while they work, M-5
	// would never be taken: start early enough in a minute for the
	// masters to finish within it, under load too.
	var m0 time.Time
	master.PollFor(t, "the database clock within the first half of a minute", 30*time.Second, func() bool {
		var into float64
		if err := pool.QueryRow(ctx, `SELECT date_trunc('minute', now() - interval '3 seconds'),
			EXTRACT(EPOCH FROM now() - interval '3 seconds' - date_trunc('minute', now() - interval '3 seconds'))`).Scan(&m0, &into); err != nil {
			t.Fatal(err)
		}
		return into < 30
	})
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
		VALUES ('metrics', $1::timestamptz - interval '3 minutes', 'dead', now() + interval '2 seconds')`, m0); err != nil {
		t.Fatal(err)
	}
	b := start(t, pool, resolve(t, nil), nil, func(s *master.Settings) { s.Name = "one" })
	other := start(t, pool, resolve(t, nil), nil, func(s *master.Settings) { s.Name = "two" })
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
