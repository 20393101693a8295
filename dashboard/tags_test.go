package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/dashboard"
	"github.com/fleet-go/fleet/queue"
)

// Pending and failed jobs filter by tag; tags and priorities come with
// the jobs, a tag whose name is a secret's redacted; a bad tag is a 400
// naming it.
func TestDashboardFiltersByTag(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	failJobs(t, b.pool, queue.NewJob("broken", nil).Tags("tenant:42"))
	c := queue.NewClient(b.pool, queue.Defaults{})
	if _, err := c.Dispatch(context.Background(), queue.NewJob("tagged", nil).Tags("tenant:42", "token:s3cret").Priority(-2)); err != nil {
		t.Fatal(err)
	}
	a := b.do(t, "GET", "jobs?status=pending&tag=tenant:42", b.view, "")
	if a.code != http.StatusOK || strings.Count(a.raw, `"name":"tagged"`) != 1 || strings.Contains(a.raw, `"name":"broken"`) ||
		!strings.Contains(a.raw, `"priority":-2`) || !strings.Contains(a.raw, `"token:[redacted]"`) || strings.Contains(a.raw, "s3cret") {
		t.Fatalf("pending tagged tenant:42: %d %s", a.code, a.raw)
	}
	a = b.do(t, "GET", "failed?tag=tenant:42", b.view, "")
	if a.code != http.StatusOK || a.body["total"] != float64(1) || !strings.Contains(a.raw, `"name":"broken"`) {
		t.Fatalf("failed tagged tenant:42: %d %s", a.code, a.raw)
	}
	a = b.do(t, "GET", "failed?tag=nobody", b.view, "")
	if a.code != http.StatusOK || a.body["total"] != float64(0) {
		t.Fatalf("failed tagged nobody: %d %s", a.code, a.raw)
	}
	for _, bad := range []string{"jobs?status=pending&tag=", "failed?tag=a%0Ab", "jobs?status=completed&tag=x"} {
		if a := b.do(t, "GET", bad, b.view, ""); a.code != http.StatusBadRequest || a.body["parameter"] != "tag" {
			t.Fatalf("GET %s: %d %s, want 400 naming tag", bad, a.code, a.raw)
		}
	}
}
