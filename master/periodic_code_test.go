package master_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// ReportArgs is the args of the typed job of the schedules registered in
// Go below.
type ReportArgs struct {
	Kind string `json:"kind"`
	Tick string `json:"tick"`
}

func (ReportArgs) JobName() string { return "report" }

// codeSchedules registers periodic jobs in Go as an app does, and returns
// the schedules its masters run.
func codeSchedules(t *testing.T, register func(jobs *queue.Registry)) []periodic.Schedule {
	t.Helper()
	jobs := queue.NewRegistry()
	queue.HandleTyped(jobs, func(context.Context, *queue.Job, ReportArgs) error { return nil })
	register(jobs)
	s, err := jobs.PeriodicSchedules(queue.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Two masters run a schedule registered in Go, @every 1s: each second
// from the first tick to the last is dispatched once, as the typed args
// with the tick, on the spec's queue and with every option of the spec.
func TestMasterPeriodicCodeScheduleTwoMasters(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	scheds := codeSchedules(t, func(jobs *queue.Registry) {
		jobs.Periodic("tick", "@every 1s",
			queue.NewTypedJob(ReportArgs{Kind: "daily"}).OnQueue("ticks").Priority(-5).Tries(3).Backoff(10, 60).
				Timeout(2*time.Minute).Tags("nightly").Metadata(map[string]string{"team": "ops"}).Limit("reports", 1000),
			// A tick a busy machine makes late is dispatched late, not skipped.
			queue.PeriodicOpts{TickKey: "tick", CatchUp: queue.CatchUpAll})
	})
	every := func(s *master.Settings) { s.Periodic = scheds }
	one := start(t, pool, resolve(t, nil), nil, every, func(s *master.Settings) { s.Name = "one" })
	two := start(t, pool, resolve(t, nil), nil, every, func(s *master.Settings) { s.Name = "two" })
	poll(t, "four ticks", func() bool { return one.count(t, `SELECT count(*) FROM fleet_periodic_ticks`) >= 4 })
	one.stop(t)
	two.stop(t)

	rows, err := pool.Query(context.Background(), `
		SELECT j.payload, j.queue, j.name, j.priority, j.max_tries, j.backoff_secs, j.timeout_ms, j.tags, j.metadata, j.limit_key, j.limit_n, p.tick
		FROM queue_jobs j JOIN fleet_periodic_ticks p ON p.job_id = j.id AND p.name = 'tick'
		ORDER BY p.tick`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ticks []time.Time
	for rows.Next() {
		var payload, metadata []byte
		var q, name, key string
		var priority, tries, limit int
		var backoff []int32
		var timeout int64
		var tags []string
		var tick time.Time
		if err := rows.Scan(&payload, &q, &name, &priority, &tries, &backoff, &timeout, &tags, &metadata, &key, &limit, &tick); err != nil {
			t.Fatal(err)
		}
		var args ReportArgs
		if err := json.Unmarshal(payload, &args); err != nil {
			t.Fatal(err)
		}
		if at, err := time.Parse(time.RFC3339, args.Tick); err != nil || !at.Equal(tick) || args.Kind != "daily" {
			t.Errorf("tick %v: payload %s", tick, payload)
		}
		if q != "ticks" || name != "report" || priority != -5 || tries != 3 || !slices.Equal(backoff, []int32{10, 60}) || timeout != 120_000 ||
			!slices.Equal(tags, []string{"nightly"}) || string(metadata) != `{"team": "ops"}` || key != "reports" || limit != 1000 {
			t.Errorf("tick %v: queue %s, name %s, priority %d, tries %d, backoff %v, timeout %d ms, tags %v, metadata %s, limit %s %d",
				tick, q, name, priority, tries, backoff, timeout, tags, metadata, key, limit)
		}
		ticks = append(ticks, tick)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ticks) < 4 {
		t.Fatalf("ticks %v", ticks)
	}
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Fatalf("ticks %v: %s between two, want each second once", ticks, d)
		}
	}
	if jobs, recorded := one.count(t, `SELECT count(*) FROM queue_jobs`), one.count(t, `SELECT count(*) FROM fleet_periodic_ticks`); jobs != recorded || jobs != len(ticks) {
		t.Fatalf("%d jobs, %d recorded ticks, %d ticks with their job", jobs, recorded, len(ticks))
	}
}

// Schedules registered in Go follow the catch-up rules of the
// configuration's: masters down across five ticks, then none, last and
// all (capped at 3) decide what the missed ticks become.
func TestMasterPeriodicCodeScheduleCatchUp(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	// An hourly schedule whose ticks are half an hour away from now: every
	// due tick was missed, none is on time while the test runs.
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	minute := (now.UTC().Minute() + 30) % 60
	expr := fmt.Sprintf("%d * * * *", minute)
	latest := now.UTC().Truncate(time.Hour).Add(time.Duration(minute) * time.Minute)
	if latest.After(now) {
		latest = latest.Add(-time.Hour)
	}
	for _, name := range []string{"none", "last", "all"} {
		if _, err := pool.Exec(ctx, `INSERT INTO fleet_periodic (name, cursor_at) VALUES ($1, $2)`, name, latest.Add(-4*time.Hour-50*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	scheds := codeSchedules(t, func(jobs *queue.Registry) {
		job := queue.NewTypedJob(ReportArgs{Kind: "hourly"}).OnQueue("ticks")
		jobs.Periodic("none", expr, job, queue.PeriodicOpts{TickKey: "tick"})
		jobs.Periodic("last", expr, job, queue.PeriodicOpts{TickKey: "tick", CatchUp: queue.CatchUpLast})
		jobs.Periodic("all", expr, job, queue.PeriodicOpts{TickKey: "tick", CatchUp: queue.CatchUpAll, CatchUpMax: 3})
	})
	b := start(t, pool, resolve(t, nil), nil, func(s *master.Settings) { s.Periodic = scheds })
	poll(t, "every cursor at the latest tick", func() bool {
		return b.count(t, `SELECT count(*) FROM fleet_periodic WHERE cursor_at = $1`, latest) == 3
	})
	hours := func(back ...int) []time.Time {
		var out []time.Time
		for _, h := range back {
			out = append(out, latest.Add(-time.Duration(h)*time.Hour))
		}
		return out
	}
	for name, want := range map[string][]time.Time{"none": nil, "last": hours(0), "all": hours(2, 1, 0)} {
		if got := jobTicks(t, b, name); !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Errorf("%s: dispatched ticks %v, want %v", name, got, want)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM queue_jobs`); n != 4 {
		t.Errorf("%d jobs, want 4", n)
	}
}
