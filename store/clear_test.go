package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/store"
)

// TestQueueClearDeletesWhatNoWorkerHolds clears a queue holding pending,
// delayed, parked, limited and unique jobs and one a worker runs: it
// deletes all but the running one, in batches, counts them right, gives
// the limit slots of deleted unparked jobs back, frees the unique key, and
// leaves other queues alone.
func TestQueueClearDeletesWhatNoWorkerHolds(t *testing.T) {
	t.Parallel()
	b := newLimitBundle(t)
	ctx := t.Context()
	// Key k at 2: two unparked, three parked; then one of the unparked runs.
	b.dispatch(t, "q", "k", 2, 5, 0)
	running := b.claim(t, "q", 1)
	if len(running) != 1 {
		t.Fatalf("claimed %d", len(running))
	}
	plain := make([]store.JobInsertParams, 0, 8)
	for i := range 8 {
		p := store.JobInsertParams{Queue: "q", Name: "n", Payload: []byte(`{}`)}
		if i >= 5 {
			p.Delay = time.Hour
		}
		plain = append(plain, p)
	}
	if _, err := b.st.JobInsertMany(ctx, b.pool, plain); err != nil {
		t.Fatal(err)
	}
	unique := func() store.UniqueInsert {
		t.Helper()
		got, err := b.st.JobInsertUnique(ctx, b.pool, []store.JobInsertParams{{Queue: "q", Name: "u", Payload: []byte(`{}`)}},
			[]store.UniqueParams{{Base: "u", Period: time.Hour, KeepCompleted: true}})
		if err != nil || len(got) != 1 {
			t.Fatalf("unique dispatch: %+v %v", got, err)
		}
		return got[0]
	}
	if u := unique(); u.Duplicate {
		t.Fatalf("first unique dispatch: %+v", u)
	}
	b.dispatch(t, "other", "k", 2, 2, 0) // parked: key k is full
	if _, err := b.st.JobInsertMany(ctx, b.pool, []store.JobInsertParams{{Queue: "other", Name: "n", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if a := b.active(t, "k"); a != 2 {
		t.Fatalf("active %d before the clear, want 2", a)
	}

	const want = 1 + 3 + 8 + 1 // the unparked limited job not running, the parked, the plain, the unique
	if n, err := b.st.QueueUnreservedCount(ctx, "q"); err != nil || n != want {
		t.Fatalf("unreserved %d, %v; want %d", n, err, want)
	}
	n, err := b.st.QueueClear(ctx, store.QueueClearParams{Queue: "q", Batch: 2})
	if err != nil || n != want {
		t.Fatalf("cleared %d, %v; want %d", n, err, want)
	}
	if left := scalar[[]int64](t, b.pool, `SELECT array_agg(id) FROM queue_jobs WHERE queue = 'q'`); len(left) != 1 || left[0] != running[0].ID {
		t.Fatalf("left in q: %v, want only the running job %d", left, running[0].ID)
	}
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM queue_jobs WHERE queue = 'other'`); n != 3 {
		t.Fatalf("%d jobs left in other, want its 3", n)
	}
	// The deleted unparked job gave its slot back; the running one keeps its.
	if a := b.active(t, "k"); a != 1 {
		t.Fatalf("active %d after the clear, want 1 (the running job)", a)
	}
	if n, err := b.st.QueueUnreservedCount(ctx, "q"); err != nil || n != 0 {
		t.Fatalf("unreserved %d after the clear, %v", n, err)
	}
	// The freed slot goes to a parked job of the key in another queue.
	if res, err := b.st.LimitSweep(ctx, store.LimitSweepParams{Keys: 10, PerKey: 10}); err != nil || res.Unparked != 1 {
		t.Fatalf("sweep after the clear: %+v %v; want 1 unparked", res, err)
	}
	// The cleared unique job never ran: its key is free.
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM queue_unique_keys`); n != 0 {
		t.Fatalf("%d kept unique keys after the clear", n)
	}
	if u := unique(); u.Duplicate {
		t.Fatalf("a unique dispatch after the clear is a duplicate: %+v", u)
	}
	// Nothing left to clear: nothing deleted.
	if _, err := b.st.QueueClear(ctx, store.QueueClearParams{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.st.QueueClear(ctx, store.QueueClearParams{Queue: "q"}); err != nil || n != 0 {
		t.Fatalf("second clear: %d, %v", n, err)
	}
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM queue_jobs WHERE queue = 'q'`); n != 1 {
		t.Fatalf("%d jobs in q, want the running one", n)
	}
}

// TestQueueClearBatchKeepsItsPlanUnderAGenericPlan: a batch reads about
// its batch of the queue's ready index from its cursor, under a generic
// plan, whatever the queue and the table hold.
func TestQueueClearBatchKeepsItsPlanUnderAGenericPlan(t *testing.T) {
	t.Parallel()
	db := newGenericDB(t)
	exec(t, db.pool, `
		INSERT INTO queue_jobs (queue, name, available_at)
		SELECT CASE WHEN g % 2 = 0 THEN 'bulk' ELSE 'mail' END, 'n', now() - (60000 - g) * interval '1 millisecond'
		FROM generate_series(1, 60000) g`)
	exec(t, db.pool, `INSERT INTO queue_jobs (queue, name, available_at) SELECT 'mail', 'n', now() + interval '1 hour' FROM generate_series(1, 1000)`)
	exec(t, db.pool, `ANALYZE queue_jobs`)
	maxID := scalar[int64](t, db.pool, `SELECT max(id) FROM queue_jobs`)
	const limit = 100
	var cur store.ClearCursor
	for range 6 { // as a cached statement would have been by now
		res, err := db.st.QueueClearBatch(t.Context(), store.QueueClearBatchParams{Queue: "mail", After: cur, MaxID: maxID, Limit: limit})
		if err != nil || res.Deleted != limit {
			t.Fatalf("batch: %+v, %v", res, err)
		}
		cur = res.Next
	}
	// The batch after the sixth's cursor, past 600 deleted jobs: its index
	// scan, its lookups by id and its delete each count the batch, about
	// 3 × 100 of the 61 000.
	read, plan := explainGeneric(t, db, db.rec.last(t))
	if n := read.of("queue_jobs"); n > 4*limit {
		t.Fatalf("read %d rows of queue_jobs for a batch of %d (%s)\n%s", n, limit, read, plan)
	}
	if !strings.Contains(plan, "queue_jobs_ready_idx") {
		t.Fatalf("the batch does not walk the ready index:\n%s", plan)
	}
	if n := scalar[int64](t, db.pool, `SELECT count(*) FROM queue_jobs WHERE queue = 'mail'`); n != 31000-6*limit {
		t.Fatalf("%d jobs of mail left, want %d", n, 31000-6*limit)
	}
}
