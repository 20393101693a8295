package dashboard_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/dashboard"
)

func TestDashboardCancelJob(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	path := fmt.Sprintf("jobs/%d/cancel", b.pendingJobID)
	if a := b.do(t, "POST", path, b.view, ""); a.code != http.StatusForbidden || !strings.Contains(a.raw, "operate") {
		t.Fatalf("cancel with a view token: %d %s", a.code, a.raw)
	}
	a := b.do(t, "POST", path, b.operate, "")
	if a.code != http.StatusOK || a.body["outcome"] != "cancelled" || a.body["id"] != float64(b.pendingJobID) {
		t.Fatalf("cancel: %d %s", a.code, a.raw)
	}
	story := b.do(t, "GET", fmt.Sprintf("jobs/%d", b.pendingJobID), b.view, "")
	if story.body["state"] != "cancelled" || !strings.Contains(story.raw, "cancelled by the dashboard") {
		t.Fatalf("story of the cancelled job: %s", story.raw)
	}
	if a := b.do(t, "POST", path, b.operate, ""); a.code != http.StatusNotFound {
		t.Fatalf("cancel again: %d %s, want 404", a.code, a.raw)
	}
	for _, bad := range []string{"jobs/abc/cancel", "jobs/0/cancel"} {
		if a := b.do(t, "POST", bad, b.operate, ""); a.code != http.StatusBadRequest || a.body["parameter"] != "id" {
			t.Fatalf("POST %s: %d %s, want 400 naming id", bad, a.code, a.raw)
		}
	}
}
