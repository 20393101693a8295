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

// TestJobInspectInTx: in a transaction, InTx reads the jobs that
// transaction inserted, in a savepoint too, and not those committed by
// others, before or during it.
func TestJobInspectInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	insert := func(db store.DBTX, name string) int64 {
		t.Helper()
		ids, err := st.JobInsertMany(ctx, db, []store.JobInsertParams{{Queue: "q", Name: name, Payload: []byte(`{}`)}})
		if err != nil {
			t.Fatal(err)
		}
		return ids[0]
	}
	insert(pool, "before")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	mine := insert(tx, "mine")
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		t.Fatal(err)
	}
	nested := insert(sp, "nested")
	if err := sp.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	insert(pool, "during") // committed by another transaction, visible to tx's next statement
	names := func(db store.DBTX, inTx bool) []string {
		t.Helper()
		jobs, err := store.JobInspect(ctx, db, store.JobInspectParams{InTx: inTx})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range jobs {
			out = append(out, j.Name)
		}
		return out
	}
	if got := names(tx, true); !slices.Equal(got, []string{"mine", "nested"}) {
		t.Errorf("InTx read %v, want [mine nested] (ids %d, %d)", got, mine, nested)
	}
	if got := names(tx, false); !slices.Equal(got, []string{"before", "mine", "nested", "during"}) {
		t.Errorf("the transaction reads %v", got)
	}
	if got := names(pool, false); !slices.Equal(got, []string{"before", "during"}) {
		t.Errorf("the pool reads %v", got)
	}
	if err := pgx.BeginFunc(ctx, pool, func(other pgx.Tx) error {
		if got := names(other, true); len(got) != 0 {
			t.Errorf("a transaction that inserted nothing reads %v", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestJobMakeDue: delayed jobs of the queues named become available now;
// others, running ones and parked ones keep their time.
func TestJobMakeDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	_, err := st.JobInsertMany(ctx, pool, []store.JobInsertParams{
		{Queue: "a", Name: "delayed", Payload: []byte(`{}`), Delay: time.Hour},
		{Queue: "a", Name: "running", Payload: []byte(`{}`), Delay: time.Hour},
		{Queue: "b", Name: "other", Payload: []byte(`{}`), Delay: time.Hour},
		{Queue: "a", Name: "ready", Payload: []byte(`{}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE queue_jobs SET reserved_by = 'w', reserved_at = now() WHERE name = 'running'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO queue_jobs (queue, name, available_at) VALUES ('a', 'parked', 'infinity')`); err != nil {
		t.Fatal(err)
	}
	n, err := st.JobMakeDue(ctx, []string{"a"})
	if err != nil || n != 1 {
		t.Fatalf("JobMakeDue = %d, %v; want 1", n, err)
	}
	jobs, err := store.JobInspect(ctx, pool, store.JobInspectParams{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"delayed": "pending", "running": "reserved", "other": "delayed", "ready": "pending", "parked": "limited"}
	for _, j := range jobs {
		if j.State != want[j.Name] {
			t.Errorf("job %s is %s, want %s", j.Name, j.State, want[j.Name])
		}
	}
	if n, err := st.JobMakeDue(ctx, nil); err != nil || n != 1 {
		t.Errorf("JobMakeDue of every queue = %d, %v; want 1 (other)", n, err)
	}
}
