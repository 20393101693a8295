package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/dashboard"
	"github.com/fleet-go/fleet/store"
)

// The periodic route lists the app's schedules of both sources by name,
// then those only the database knows (no source); a dispatched tick shows
// as the last tick and its job, and with recent as the latest ticks.
func TestDashboardPeriodic(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	ctx := t.Context()
	if _, err := b.pool.Exec(ctx, `INSERT INTO fleet_periodic (name, cursor_at) VALUES ('nightly', now() - interval '2 days'), ('gone', now())`); err != nil {
		t.Fatal(err)
	}
	st := store.New(b.pool)
	v, err := st.PeriodicRead(ctx, []string{"nightly"})
	if err != nil {
		t.Fatal(err)
	}
	from := v.States[0].Cursor
	tick := from.Truncate(time.Hour).Add(time.Hour)
	res, err := st.PeriodicDispatch(ctx, store.PeriodicDispatchParams{
		Name: "nightly", From: from, To: tick, Ticks: []time.Time{tick},
		Jobs: []store.JobInsertParams{{Queue: "default", Name: "report.build", Payload: []byte(`{}`)}}, By: "test",
	})
	if err != nil || !res.Won {
		t.Fatalf("dispatch: %+v, %v", res, err)
	}
	a := b.do(t, "GET", "periodic?recent=3", b.view, "")
	if a.code != http.StatusOK {
		t.Fatalf("%d %s", a.code, a.raw)
	}
	ss, _ := a.body["schedules"].([]any)
	if len(ss) != 3 {
		t.Fatalf("schedules: %s", a.raw)
	}
	want := []struct {
		name, source string
		configured   bool
	}{{"heartbeat", "code", true}, {"nightly", "config", true}, {"gone", "", false}}
	for i, w := range want {
		s := ss[i].(map[string]any)
		source, _ := s["source"].(string)
		if s["name"] != w.name || source != w.source || s["configured"] != w.configured {
			t.Errorf("schedule %d: %v, want %+v", i, s, w)
		}
	}
	n := ss[1].(map[string]any)
	recent, _ := n["recent_ticks"].([]any)
	if n["last_job_id"] != float64(res.IDs[0]) || len(recent) != 1 || n["timezone"] != "Europe/Berlin" || n["due_since"] == nil {
		t.Errorf("nightly: %v", n)
	}
	if _, ok := ss[2].(map[string]any)["source"]; ok {
		t.Errorf("a schedule not configured has a source: %v", ss[2])
	}
}

// An app without schedules lists none: an empty list, not null.
func TestDashboardPeriodicNone(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	h := dashboard.New(fleet.New(b.pool, fleet.Options{}), dashboard.Options{})
	req := httptest.NewRequestWithContext(t.Context(), "GET", dashboard.DefaultPath+"/api/periodic", nil)
	req.Header.Set("Authorization", "Bearer "+b.view)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"schedules":[]`) {
		t.Fatalf("%d %s", w.Code, w.Body.String())
	}
}
