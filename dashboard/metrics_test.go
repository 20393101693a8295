package dashboard_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/fleet-go/fleet/dashboard"
)

// The metrics answer has a point for every bucket of the period: a minute
// without a snapshot is there with observed false, and a minute whose
// snapshot did not see its backlog has a null backlog, not 0.
func TestDashboardMetricsGaps(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	base := time.Now().Truncate(time.Minute)
	if _, err := b.pool.Exec(t.Context(), `DELETE FROM fleet_metrics WHERE kind = 'queue' AND subject = 'mail'`); err != nil {
		t.Fatal(err)
	}
	// Minutes 1, 2, 4 and 5 before this one have snapshots, minute 3 none;
	// minute 2's was written without its backlog.
	if _, err := b.pool.Exec(t.Context(), `
		INSERT INTO fleet_metrics (taken_at, kind, subject, jobs, jobs_per_minute, pending, wait_secs, backlog_seen)
		SELECT $1::timestamptz - m * interval '1 minute', 'queue', 'mail', m, m, 10 * m, m, m <> 2
		FROM unnest(ARRAY[1, 2, 4, 5]) m`, base); err != nil {
		t.Fatal(err)
	}

	a := b.do(t, "GET", "metrics?period=hour&queue=mail", b.view, "")
	if a.code != http.StatusOK {
		t.Fatalf("metrics: %d %s", a.code, a.raw)
	}
	rows, _ := a.body["rows"].([]any)
	if len(rows) < 59 || len(rows) > 61 {
		t.Fatalf("%d rows, want one per minute of the hour: %s", len(rows), a.raw)
	}
	by := map[int]map[string]any{} // minutes before base
	var prev time.Time
	for i, x := range rows {
		r := x.(map[string]any)
		at, err := time.Parse(time.RFC3339Nano, r["taken_at"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if r["kind"] != "queue" || r["subject"] != "mail" {
			t.Errorf("row %d is not queue mail: %v", i, r)
		}
		if i > 0 && at.Sub(prev) != time.Minute {
			t.Errorf("row %d at %s follows %s: want every minute once", i, at, prev)
		}
		prev = at
		by[int(base.Sub(at)/time.Minute)] = r
	}
	for m := 1; m <= 30; m++ {
		r := by[m]
		if r == nil {
			t.Fatalf("no row for minute -%d", m)
		}
		observed := m == 1 || m == 2 || m == 4 || m == 5
		if r["observed"] != observed {
			t.Errorf("minute -%d: observed %v, want %v: %v", m, r["observed"], observed, r)
		}
		switch {
		case !observed:
			if r["jobs"] != 0.0 || r["pending"] != nil || r["wait_secs"] != nil {
				t.Errorf("minute -%d without a snapshot: %v", m, r)
			}
		case m == 2:
			if r["jobs"] != 2.0 || r["backlog_seen"] != false || r["pending"] != nil || r["wait_secs"] != nil {
				t.Errorf("minute -2, backlog not seen: %v; want jobs 2, pending and wait null", r)
			}
		default:
			if r["jobs"] != float64(m) || r["backlog_seen"] != true || r["pending"] != float64(10*m) || r["wait_secs"] != float64(m) {
				t.Errorf("minute -%d: %v; want jobs %d, pending %d, wait %d", m, r, m, 10*m, m)
			}
		}
	}
}
