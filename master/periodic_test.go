package master_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/pgtest"
)

func schedule(t *testing.T, name, expr string, mode periodic.CatchUp, maxMissed int) periodic.Schedule {
	t.Helper()
	spec, err := periodic.Parse(expr, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	return periodic.Schedule{Name: name, Spec: spec, Job: "report", Queue: "ticks", Payload: json.RawMessage(`{"n":1}`),
		TickKey: "tick", CatchUp: mode, CatchUpMax: maxMissed}
}

// jobTicks returns the ticks in the payloads of the queued jobs of
// schedule name (their payload says {"n":1,"tick":...}), oldest first.
func jobTicks(t *testing.T, b *bundle, name string) []time.Time {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT (j.payload->>'tick')::timestamptz FROM queue_jobs j
		JOIN fleet_periodic_ticks p ON p.job_id = j.id AND p.name = $1
		ORDER BY 1`, name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var tick time.Time
		if err := rows.Scan(&tick); err != nil {
			t.Fatal(err)
		}
		out = append(out, tick)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Masters down across several ticks: when one is back, each schedule's
// catch-up decides what the missed ticks become.
func TestMasterPeriodicCatchUp(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	// An hourly schedule whose ticks are half an hour away from now, so
	// that none is on time while the test runs: every due tick was missed.
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
	// The last master stopped just after the tick four hours and fifty
	// minutes before the latest: five ticks were missed.
	for _, name := range []string{"none", "last", "all"} {
		if _, err := pool.Exec(ctx, `INSERT INTO fleet_periodic (name, cursor_at) VALUES ($1, $2)`, name, latest.Add(-4*time.Hour-50*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	b := start(t, pool, resolve(t, nil), nil, func(s *master.Settings) {
		s.Periodic = []periodic.Schedule{
			schedule(t, "none", expr, periodic.CatchUpNone, 0),
			schedule(t, "last", expr, periodic.CatchUpLast, 0),
			schedule(t, "all", expr, periodic.CatchUpAll, 3),
		}
	})
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
	// Another master joining later finds nothing left to do.
	second := start(t, pool, resolve(t, nil), nil, func(s *master.Settings) {
		s.Name = "second"
		s.Periodic = []periodic.Schedule{schedule(t, "last", expr, periodic.CatchUpLast, 0)}
	})
	// Rounds of both masters, every tick (20 ms).
	second.sig.PeriodicRound.WaitFresh(t, 10)
	b.sig.PeriodicRound.WaitFresh(t, 10)
	if n := b.count(t, `SELECT count(*) FROM queue_jobs`); n != 4 {
		t.Errorf("%d jobs after a second master, want 4", n)
	}
	if logs := b.logs.String(); !strings.Contains(logs, "periodic schedule missed ticks while no master ran") {
		t.Errorf("no warning about the missed ticks:\n%s", logs)
	}
}

// Two masters on @every 1s: every second from the first tick to the last
// is dispatched, once, and each tick's job is the one recorded with it.
func TestMasterPeriodicTwoMasters(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	every := func(s *master.Settings) {
		s.Periodic = []periodic.Schedule{schedule(t, "tick", "@every 1s", periodic.CatchUpNone, 0)}
	}
	b := start(t, pool, resolve(t, nil), nil, every, func(s *master.Settings) { s.Name = "one" })
	start(t, pool, resolve(t, nil), nil, every, func(s *master.Settings) { s.Name = "two" })
	poll(t, "four ticks", func() bool { return b.count(t, `SELECT count(*) FROM fleet_periodic_ticks`) >= 4 })
	b.stop(t)
	ticks := jobTicks(t, b, "tick")
	if len(ticks) < 4 {
		t.Fatalf("ticks %v", ticks)
	}
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Fatalf("ticks %v: %s between two, want each second once", ticks, d)
		}
	}
	if jobs, recorded := b.count(t, `SELECT count(*) FROM queue_jobs`), b.count(t, `SELECT count(*) FROM fleet_periodic_ticks`); jobs != recorded || jobs != len(ticks) {
		t.Fatalf("%d jobs, %d recorded ticks, %d ticks in payloads", jobs, recorded, len(ticks))
	}
}
