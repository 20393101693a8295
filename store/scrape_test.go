package store_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// scrapeCountersDDL creates fleet_counters where the migration does not yet.
const scrapeCountersDDL = `
	CREATE TABLE IF NOT EXISTS fleet_counters (
		queue      text PRIMARY KEY,
		processed  bigint NOT NULL DEFAULT 0,
		failed     bigint NOT NULL DEFAULT 0,
		updated_at timestamptz NOT NULL DEFAULT now()
	)`

func scrapeExec(t testing.TB, pool *pgxpool.Pool, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func TestScrapeRead(t *testing.T) {
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := t.Context()

	scrapeExec(t, pool, scrapeCountersDDL)
	empty, err := st.ScrapeRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Scrape{
		Queues: []store.ScrapeQueue{}, Masters: map[string]int{}, Processes: []store.ScrapeProcesses{},
		PausedSupervisors: []string{}, PausedQueues: []string{},
		Counters: []store.ScrapeCounter{}, Runtimes: []store.ScrapeRuntime{},
		Exporter: true, Own: []store.ScrapeProcesses{}, Held: []store.ScrapeHeld{},
	}
	if !reflect.DeepEqual(empty, want) {
		t.Fatalf("empty database:\n got %+v\nwant %+v", empty, want)
	}

	scrapeExec(t, pool,
		// mail: 3 pending (oldest ready for 60 s), 1 delayed, 2 reserved.
		`INSERT INTO queue_jobs (queue, name, available_at) VALUES
			('mail', 'a', now() - interval '60 seconds'), ('mail', 'a', now() - interval '10 seconds'),
			('mail', 'a', now()), ('mail', 'a', now() + interval '1 hour')`,
		`INSERT INTO queue_jobs (queue, name, available_at, reserved_by, reserved_master, reserved_at, attempts) VALUES
			('mail', 'a', now() - interval '1 hour', 'w1', 'm1', now(), 1),
			('mail', 'a', now() - interval '1 hour', 'w2', 'm1', now(), 1)`,
		// default: only delayed, so no ready job and no wait.
		`INSERT INTO queue_jobs (queue, name, available_at) VALUES ('default', 'b', now() + interval '1 minute')`,
		// drained: only counters.
		`INSERT INTO fleet_counters (queue, processed, failed) VALUES ('mail', 40, 3), ('drained', 7, 0)`,
		`INSERT INTO fleet_masters (instance, name, host, pid, state, report, expires_at) VALUES
			('i-m1', 'm1', 'h1', 1, 'running', '{"supervisors":[
				{"name":"default","queues":["default","mail"],"balance":"auto","paused":false,"processes":{"default":1,"mail":3}},
				{"name":"batch","queues":["default","mail"],"balance":"off","paused":true,"processes":{"default,mail":2}}]}',
			 now() + interval '1 minute'),
			('i-m2', 'm2', 'h2', 2, 'running', '{"supervisors":[{"name":"default","processes":{"mail":2}}]}', now() + interval '1 minute'),
			('i-m3', 'm3', 'h3', 3, 'draining', '{"supervisors":[{"name":"default","processes":null}, 7, {"processes":{"x":1}}]}', now() + interval '1 minute'),
			('i-m4', 'm4', 'h4', 4, 'paused', '{"supervisors":"not an array"}', now() + interval '1 minute'),
			('i-gone', 'gone', 'h5', 5, 'running', '{"supervisors":[{"name":"default","processes":{"mail":50}}]}', now() - interval '1 second')`,
		`INSERT INTO fleet_state (key) VALUES ('pause:*'), ('pause:supervisor:batch'), ('pause:queue:mail'),
			('pause:queue:zeta'), ('terminate')`,
		// History is not read for runtimes: only fleet_runtime_counters.
		`INSERT INTO fleet_jobs (job_id, queue, name, attempt, status, started_at, finished_at, runtime_ms)
		 VALUES (11, 'mail', 'a', 1, 'completed', now(), now(), 999999)`,
		`INSERT INTO fleet_runtime_counters (queue, name, shard, bucket, n, sum_ms) VALUES
			('mail', 'a', 0, 2, 3, 60), ('mail', 'a', 5, 2, 1, 20), ('mail', 'a', 1, 7, 2, 1500)`,
	)

	got, err := st.ScrapeRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Queues) != 3 {
		t.Fatalf("queues: got %+v", got.Queues)
	}
	if w := got.Queues[2].OldestWaitSecs; w < 60 || w > 90 {
		t.Errorf("mail oldest wait: got %v s, want about 60", w)
	}
	wantRT := []store.ScrapeRuntime{{Queue: "mail", Name: "a", Bucket: 2, N: 4, SumMs: 80}, {Queue: "mail", Name: "a", Bucket: 7, N: 2, SumMs: 1500}}
	if !reflect.DeepEqual(got.Runtimes, wantRT) {
		t.Errorf("runtimes:\n got %+v\nwant %+v", got.Runtimes, wantRT)
	}
	got.Queues[2].OldestWaitSecs = 0
	got.Runtimes = nil
	want = store.Scrape{
		Queues: []store.ScrapeQueue{
			{Queue: "default", Delayed: 1},
			{Queue: "drained"},
			{Queue: "mail", Pending: 3, Delayed: 1, Reserved: 2},
		},
		Masters: map[string]int{"online": 3, "draining": 1, "offline": 1},
		Processes: []store.ScrapeProcesses{
			{Supervisor: "batch", Group: "default,mail", Processes: 2},
			{Supervisor: "default", Group: "default", Processes: 1},
			{Supervisor: "default", Group: "mail", Processes: 5},
		},
		PausedAll:         true,
		PausedSupervisors: []string{"batch"},
		PausedQueues:      []string{"mail", "zeta"},
		Counters:          []store.ScrapeCounter{{Queue: "drained", Processed: 7}, {Queue: "mail", Processed: 40, Failed: 3}},
		Exporter:          true,
		Own:               []store.ScrapeProcesses{},
		Held:              []store.ScrapeHeld{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("scrape:\n got %+v\nwant %+v", got, want)
	}
}

// TestScrapeReadAs: of two masters reading, the first holds the exporter
// lease and reads the fleet-wide fields; the other reads only its own
// processes, until the holder releases the lease or stops renewing it.
// TestScrapeRuntimeNames: the runtime histogram shows a queue's busiest
// job names by name and sums the others under "other".
func TestScrapeRuntimeNames(t *testing.T) {
	pool := pgtest.Pool(t)
	st := store.New(pool)
	scrapeExec(t, pool, fmt.Sprintf(`INSERT INTO fleet_runtime_counters (queue, name, shard, bucket, n, sum_ms)
		SELECT 'q', 'job' || g, 0, 1, 100 + g, g FROM generate_series(1, %d) g`, store.ScrapeRuntimeNames+3))
	sc, err := st.ScrapeRead(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Runtimes) != store.ScrapeRuntimeNames+1 {
		t.Fatalf("%d runtime rows, want %d", len(sc.Runtimes), store.ScrapeRuntimeNames+1)
	}
	var other store.ScrapeRuntime
	for _, r := range sc.Runtimes {
		if r.Name == store.ScrapeRuntimeOther {
			other = r
		}
	}
	// job1..job3 have the fewest attempts.
	if other.N != 101+102+103 || other.SumMs != 6 {
		t.Fatalf("other: %+v", other)
	}
}

func TestScrapeReadAs(t *testing.T) {
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := t.Context()
	scrapeExec(t, pool,
		`INSERT INTO queue_jobs (queue, name) VALUES ('mail', 'a')`,
		`INSERT INTO fleet_masters (instance, name, host, pid, state, report, expires_at) VALUES
			('i-a', 'a', 'h1', 1, 'running', '{"supervisors":[{"name":"default","processes":{"mail":3}}]}', now() + interval '1 minute'),
			('i-b', 'b', 'h2', 2, 'running', '{"supervisors":[{"name":"default","processes":{"mail":1,"x":"bad"}}]}', now() + interval '1 minute')`)
	read := func(inst string, lease time.Duration) store.Scrape {
		t.Helper()
		sc, err := st.ScrapeReadAs(ctx, store.ScrapeAs{Instance: inst, Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	a := read("i-a", time.Minute)
	b := read("i-b", time.Minute)
	if !a.Exporter || len(a.Queues) != 1 || len(a.Processes) != 1 || a.Processes[0].Processes != 4 {
		t.Fatalf("first reader: %+v", a)
	}
	if b.Exporter || len(b.Queues) != 0 || len(b.Processes) != 0 || len(b.Counters) != 0 || len(b.PausedQueues) != 0 {
		t.Fatalf("second reader: %+v", b)
	}
	wantA := []store.ScrapeProcesses{{Supervisor: "default", Group: "mail", Processes: 3}}
	wantB := []store.ScrapeProcesses{{Supervisor: "default", Group: "mail", Processes: 1}}
	if !reflect.DeepEqual(a.Own, wantA) || !reflect.DeepEqual(b.Own, wantB) {
		t.Fatalf("own processes: a %+v, b %+v", a.Own, b.Own)
	}
	if !read("i-a", time.Minute).Exporter {
		t.Fatal("the holder lost the lease by renewing it")
	}
	if err := st.ScrapeRelease(ctx, "i-b"); err != nil { // not the holder: no change
		t.Fatal(err)
	}
	if read("i-b", time.Minute).Exporter {
		t.Fatal("a release by a non-holder freed the lease")
	}
	if err := st.ScrapeRelease(ctx, "i-a"); err != nil {
		t.Fatal(err)
	}
	if !read("i-b", time.Minute).Exporter || read("i-a", time.Minute).Exporter {
		t.Fatal("after the release the other master should hold the lease")
	}
	// A lease not renewed within its length passes to the next reader.
	time.Sleep(20 * time.Millisecond)
	if !read("i-a", 10*time.Millisecond).Exporter {
		t.Fatal("a lapsed lease was not taken over")
	}
	if _, err := st.ScrapeReadAs(ctx, store.ScrapeAs{}); err == nil {
		t.Fatal("no instance: want an error")
	}
}

// BenchmarkScrapeRead1M reads the scrape of a database holding 1,000,000
// pending jobs in 4 queues (after VACUUM ANALYZE, as autovacuum would leave
// the table), the kind of backlog the gauges must keep up with.
func BenchmarkScrapeRead1M(b *testing.B) {
	pool := pgtest.Pool(b)
	st := store.New(pool)
	scrapeExec(b, pool, scrapeCountersDDL,
		`INSERT INTO queue_jobs (queue, name, payload, available_at)
		 SELECT 'q' || (g % 4), 'job', '{"to":"someone@example.com"}', now() - g * interval '1 millisecond'
		 FROM generate_series(1, 1000000) g`,
		`VACUUM ANALYZE queue_jobs`)
	for b.Loop() {
		sc, err := st.ScrapeRead(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if len(sc.Queues) != 4 || sc.Queues[0].Pending != 250000 {
			b.Fatalf("queues: %+v", sc.Queues)
		}
	}
}
