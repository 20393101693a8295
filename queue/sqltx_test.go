package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// TestDispatchSQLTxExistsOnlyIfCommitted: through database/sql (pgx
// stdlib), a rolled-back dispatch leaves no job and wakes nobody; a
// committed one leaves its job and its wake-up.
func TestDispatchSQLTxExistsOnlyIfCommitted(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := t.Context()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c := queue.NewClient(pool, queue.Defaults{})

	// An idle worker's view: a LISTEN on the dispatch channel.
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.WithoutCancel(ctx))
	if _, err := listener.Exec(ctx, `LISTEN queue_jobs`); err != nil {
		t.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DispatchSQLTx(ctx, tx, queue.NewJob("lost", nil).OnQueue("rolled-back")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Some of the app's own work in the same transaction.
	if _, err := tx.ExecContext(ctx, `CREATE TABLE orders (id int)`); err != nil {
		t.Fatal(err)
	}
	res, err := c.DispatchManySQLTx(ctx, tx, []*queue.JobSpec{
		queue.NewJob("kept", map[string]int{"order": 1}).OnQueue("mail"),
		queue.NewJob("kept", map[string]int{"order": 2}).OnQueue("mail"),
	})
	ids := queue.IDs(res)
	if err != nil || len(ids) != 2 || ids[1] <= ids[0] {
		t.Fatalf("dispatch in a database/sql tx: %v, %v", ids, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	rows, _ := pool.Query(ctx, `SELECT name FROM queue_jobs ORDER BY id`)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) != 2 || names[0] != "kept" || names[1] != "kept" {
		t.Fatalf("jobs = %v, %v; want only the committed ones", names, err)
	}
	// Notifications arrive in commit order and a rollback sends none: the
	// first one is the committed transaction's, for its queue.
	n, err := listener.WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Payload != "mail" {
		t.Fatalf("first wake-up for queue %q, want mail (the rolled-back dispatch must wake nobody)", n.Payload)
	}
}

// TestDispatchSQLTxRefusesInvalidJobs: the same checks as every dispatch,
// nothing inserted.
func TestDispatchSQLTxRefusesInvalidJobs(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	c := queue.NewClient(pool, queue.Defaults{})
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := c.DispatchManySQLTx(ctx, tx, []*queue.JobSpec{queue.NewJob("ok", nil), queue.NewJob("", nil)}); !errors.Is(err, queue.ErrInvalidJob) {
		t.Fatalf("invalid job: %v, want ErrInvalidJob", err)
	}
	if _, err := c.DispatchSQLTx(ctx, nil, queue.NewJob("ok", nil)); err == nil {
		t.Fatal("nil tx accepted")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("jobs = %d, %v; want none", n, err)
	}
}

// Unique jobs through database/sql: the second dispatch of a key, in a
// later transaction, is a duplicate naming the first job.
func TestDispatchSQLTxUnique(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	c := queue.NewClient(pool, queue.Defaults{})
	ctx := t.Context()
	var ids [2]int64
	var dup [2]bool
	for i := range ids {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		j := queue.NewJob("sql.unique", nil).Unique(queue.Unique{Key: "k"})
		res, err := c.DispatchSQLTx(ctx, tx, j)
		if err != nil {
			t.Fatal(err)
		}
		ids[i], dup[i] = res.ID, res.Duplicate
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if dup[0] || !dup[1] || ids[0] != ids[1] {
		t.Fatalf("ids %v, duplicates %v: want the second a duplicate of the first", ids, dup)
	}
}
