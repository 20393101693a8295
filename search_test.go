package fleet_test

import (
	"context"
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

func TestFailedSearchNeverMatchesRedactedValues(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	svc := fleet.New(pool, fleet.Options{})
	failJobs(t, pool,
		queue.NewJob("boom", map[string]any{"to": "ann", "password": "hunter2"}),
		queue.NewJob("boom", map[string]any{"auth": map[string]any{"api_key": map[string]string{"v": "deepsecret"}}, "note": "100% sure"}),
		queue.NewJob("boom", map[string]any{"items": []any{map[string]string{"secret": "s3"}, "visible-item"}}),
	)
	count := func(search string) int {
		t.Helper()
		jobs, err := svc.FailedJobs(ctx, fleet.FailedFilter{Search: search})
		if err != nil {
			t.Fatal(err)
		}
		n, err := svc.FailedCount(ctx, fleet.FailedFilter{Search: search})
		if err != nil || n != len(jobs) {
			t.Fatalf("FailedCount(%q) = %d, %v; FailedJobs found %d", search, n, err, len(jobs))
		}
		return len(jobs)
	}
	for search, want := range map[string]int{
		"hunter2": 0, "HUNTER": 0, "deepsecret": 0, "s3": 0, // hidden values, in payloads and errors
		"ann": 1, "visible-item": 1, "100% sure": 1, "boom": 3, // name, values, keys, literal %
		"to": 1, "auth": 1, "0%": 1, "%": 1,
		"_": 1, // the error shows the hidden key's name, api_key, not its value
	} {
		if got := count(search); got != want {
			t.Errorf("search %q found %d, want %d", search, got, want)
		}
	}
	page, err := svc.FailedJobs(ctx, fleet.FailedFilter{Search: "boom", Limit: 2, Offset: 2})
	if err != nil || len(page) != 1 {
		t.Fatalf("page 2 of a search: %d, %v", len(page), err)
	}
	for _, search := range []string{"hunter2", "deepsecret"} {
		if n, err := svc.RetryAll(ctx, fleet.FailedFilter{Search: search}); err != nil || n != 0 {
			t.Fatalf("RetryAll(%q) = %d, %v", search, n, err)
		}
		if n, err := svc.ForgetAll(ctx, fleet.FailedFilter{Search: search}); err != nil || n != 0 {
			t.Fatalf("ForgetAll(%q) = %d, %v", search, n, err)
		}
	}
	if n, err := svc.ForgetAll(ctx, fleet.FailedFilter{Search: "ann"}); err != nil || n != 1 {
		t.Fatalf("ForgetAll(ann) = %d, %v", n, err)
	}
	if n, err := svc.RetryAll(ctx, fleet.FailedFilter{Search: "visible"}); err != nil || n != 1 {
		t.Fatalf("RetryAll(visible) = %d, %v", n, err)
	}
	if got := count("boom"); got != 1 {
		t.Fatalf("%d failed jobs left, want 1", got)
	}
}
