package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/dashboard"
	"github.com/fleet-go/fleet/queue"
)

// TestDashboardClearQueue: POST queues/{queue}/clear needs operate, deletes
// the queue's jobs that are not running and answers how many; a queue name
// holding "/" or spaces travels escaped; a bad name is a 400 naming queue.
func TestDashboardClearQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	ctx := t.Context()
	odd := "exports/eu west"
	c := queue.NewClient(b.pool, queue.Defaults{})
	if _, err := c.DispatchMany(ctx, []*queue.JobSpec{
		queue.NewJob("x", nil).OnQueue(odd),
		queue.NewJob("x", nil).OnQueue(odd).Delay(time.Hour),
		queue.NewJob("x", nil).OnQueue(odd).Limit("k", 1),
		queue.NewJob("x", nil).OnQueue(odd).Limit("k", 1),
		queue.NewJob("x", nil).OnQueue("exports"),
	}); err != nil {
		t.Fatal(err)
	}
	path := "queues/" + url.PathEscape(odd) + "/clear"
	if !strings.Contains(path, "%2F") {
		t.Fatalf("the test's path %q does not escape the slash", path)
	}
	if a := b.do(t, "POST", path, b.view, ""); a.code != http.StatusForbidden || !strings.Contains(a.raw, "operate") {
		t.Fatalf("clear with a view token: %d %s", a.code, a.raw)
	}
	if n, err := b.svc.ClearCount(ctx, odd); err != nil || n != 4 {
		t.Fatalf("after a refused clear: %d jobs, %v; want 4", n, err)
	}
	if a := b.do(t, "POST", path, b.operate, ""); a.code != http.StatusOK || a.body["deleted"] != 4.0 {
		t.Fatalf("clear: %d %s", a.code, a.raw)
	}
	jobs, err := b.svc.PendingJobs(ctx, fleet.Page{Queue: "exports", Limit: 10})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("the exports queue after clearing %q: %+v %v", odd, jobs, err)
	}
	if a := b.do(t, "POST", path, b.operate, ""); a.code != http.StatusOK || a.body["deleted"] != 0.0 {
		t.Fatalf("clear again: %d %s", a.code, a.raw)
	}
	for _, q := range []string{"%20", "a%09b", strings.Repeat("q", 201)} {
		a := b.do(t, "POST", "queues/"+q+"/clear", b.operate, "")
		if a.code != http.StatusBadRequest || a.body["parameter"] != "queue" || !strings.HasPrefix(a.body["error"].(string), "queue: ") {
			t.Errorf("clear %q: %d %s, want 400 naming queue", q, a.code, a.raw)
		}
	}
	if a := b.do(t, "GET", path, b.operate, ""); a.code != http.StatusMethodNotAllowed || a.header.Get("Allow") != "POST" {
		t.Errorf("GET %s: %d %s", path, a.code, a.raw)
	}
}
