package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// TestJobClaimReturnsItsBatchInPickOrder checks that a claim returns its
// jobs in the order it picks them, (priority, available_at, id), not in
// the order its update visits the rows: the ids, available times and
// priorities are set so that each of those orders differs from the
// others, and available times tie so that the id decides between them.
func TestJobClaimReturnsItsBatchInPickOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)

	priorities := []int{5, 1, 5, 0, 1, 5, -2, 0}
	var params []store.JobInsertParams
	for i := range 48 {
		params = append(params, store.JobInsertParams{Queue: "q", Name: "n", Payload: []byte(`{}`),
			Priority: priorities[i%len(priorities)]})
	}
	ids, err := st.JobInsertMany(ctx, pool, params)
	if err != nil {
		t.Fatal(err)
	}
	// Later ids are available earlier, three jobs at a time (ties).
	if _, err := pool.Exec(ctx, `
		UPDATE queue_jobs SET available_at = now() - interval '1 hour' - ((id - $2::bigint) / 3) * interval '1 second'
		WHERE id = ANY ($1)`, ids, ids[0]); err != nil {
		t.Fatal(err)
	}
	want := func(limit int) []int64 {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT id FROM queue_jobs WHERE reserved_by IS NULL
			ORDER BY priority, available_at, id LIMIT $1`, limit)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	// A claim of part of the queue takes the first of that order, and a
	// claim of the rest the others, each in order.
	claimed := 0
	for _, limit := range []int{20, 100} {
		expected := want(limit)
		jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: "q", Limit: limit, Worker: "w"})
		if err != nil {
			t.Fatal(err)
		}
		claimed += len(jobs)
		got := make([]int64, len(jobs))
		for i, j := range jobs {
			got[i] = j.ID
		}
		if !slices.Equal(got, expected) {
			t.Errorf("a claim of %d returned %v, want %v", limit, got, expected)
		}
		if !slices.IsSortedFunc(jobs, store.ClaimOrder) {
			t.Errorf("a claim of %d did not return its jobs in ClaimOrder", limit)
		}
		for _, j := range jobs {
			var at time.Time
			if err := pool.QueryRow(ctx, `SELECT available_at FROM queue_jobs WHERE id = $1`, j.ID).Scan(&at); err != nil {
				t.Fatal(err)
			}
			if !j.AvailableAt.Equal(at) {
				t.Errorf("job %d: AvailableAt %s, the row's %s", j.ID, j.AvailableAt, at)
			}
		}
	}
	if claimed != len(ids) {
		t.Errorf("the claims took %d jobs, want %d", claimed, len(ids))
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NULL`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d jobs left unclaimed, want 0", left)
	}
}
