package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// A store's clock moves its clocked statements and nothing else: the
// oldest wait, the counts and the duties follow it, while a store without
// one reads the database's now() as before.
func TestStoreClockMovesTheClockedStatements(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	exec(t, pool, `INSERT INTO queue_jobs (queue, name, available_at) VALUES ('mail', 'a', now()), ('mail', 'b', now() + interval '5 minutes')`)
	plain := store.New(pool)
	now := scalar[time.Time](t, pool, `SELECT now()`)
	clocked, clock := onClock(plain, now.Add(10*time.Minute))

	waits, err := plain.QueueOldestWait(ctx, []string{"mail"})
	if err != nil {
		t.Fatal(err)
	}
	if w := waits["mail"]; w < 0 || w > 60 {
		t.Fatalf("without a clock the oldest wait is %v s, want about 0", w)
	}
	waits, err = clocked.QueueOldestWait(ctx, []string{"mail"})
	if err != nil {
		t.Fatal(err)
	}
	if w := waits["mail"]; w < 9*60 || w > 11*60 {
		t.Fatalf("ten minutes on, the oldest wait is %v s, want about 600", w)
	}
	counts, err := plain.QueueCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 1 || counts[0].Pending != 1 || counts[0].Delayed != 1 {
		t.Fatalf("counts without a clock %+v, want 1 pending and 1 delayed", counts)
	}
	if counts, err = clocked.QueueCounts(ctx); err != nil {
		t.Fatal(err)
	}
	if len(counts) != 1 || counts[0].Pending != 2 || counts[0].Delayed != 0 {
		t.Fatalf("counts ten minutes on %+v, want 2 pending", counts)
	}

	// A duty claimed for a minute on the clock is held until the clock
	// passes the minute.
	if won, err := clocked.DutyClaim(ctx, "x", time.Minute); err != nil || !won {
		t.Fatalf("first claim = %v, %v", won, err)
	}
	if won, err := clocked.DutyClaim(ctx, "x", time.Minute); err != nil || won {
		t.Fatalf("claim within the minute = %v, %v", won, err)
	}
	clock.Advance(time.Minute)
	if won, err := clocked.DutyClaim(ctx, "x", time.Minute); err != nil || !won {
		t.Fatalf("claim a minute on = %v, %v", won, err)
	}
}
