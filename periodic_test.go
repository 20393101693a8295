package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/pgtest"
)

// The Service lists the schedules given, in their order, each with where
// it is declared, then the schedules only the database knows, with no
// source; PeriodicSchedules returns a copy of Options.Periodic.
func TestServicePeriodicListsSources(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	scheds := []periodic.Schedule{
		{Name: "heartbeat", Source: periodic.SourceCode, Spec: periodic.MustParse("@every 30s", nil), Job: "ops.heartbeat", Queue: "ops",
			CatchUp: periodic.CatchUpLast, CatchUpMax: periodic.DefaultCatchUpMax},
		{Name: "nightly", Source: periodic.SourceConfig, Spec: periodic.MustParse("0 3 * * *", time.UTC), Job: "reports.nightly", Queue: "reports",
			CatchUp: periodic.CatchUpAll, CatchUpMax: 5},
	}
	svc := fleet.New(pool, fleet.Options{Periodic: scheds})
	if _, err := pool.Exec(ctx, `INSERT INTO fleet_periodic (name, cursor_at) VALUES ('gone', now()), ('nightly', now())`); err != nil {
		t.Fatal(err)
	}
	got := svc.PeriodicSchedules()
	if len(got) != 2 || got[0].Name != "heartbeat" || got[1].Name != "nightly" {
		t.Fatalf("PeriodicSchedules: %+v", got)
	}
	got[0].Name = "changed"
	if svc.PeriodicSchedules()[0].Name != "heartbeat" {
		t.Fatal("PeriodicSchedules returns the Service's own slice")
	}
	v, err := svc.Periodic(ctx, svc.PeriodicSchedules(), 0)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		name, source string
		configured   bool
	}
	var rows []row
	for _, s := range v.Schedules {
		rows = append(rows, row{s.Name, s.Source, s.Configured})
	}
	want := []row{{"heartbeat", "code", true}, {"nightly", "config", true}, {"gone", "", false}}
	if len(rows) != len(want) {
		t.Fatalf("schedules %+v, want %+v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("schedule %d: %+v, want %+v", i, rows[i], want[i])
		}
	}
	if n := v.Schedules[1]; n.CatchUp != "all" || n.CatchUpMax != 5 || n.Cursor == nil || n.NextTick == nil {
		t.Errorf("nightly: %+v", n)
	}
}
