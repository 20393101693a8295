package master

import (
	"context"
	"testing"
	"time"

	"github.com/fleet-go/fleet/store"
)

// Start reads once before it returns: the first children start with the
// fleet's pause state.
func TestSharedStateReadsBeforeStartReturns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	ctx := context.Background()
	for _, k := range []string{store.StatePauseSupervisorPrefix + "exports", store.StatePauseQueuePrefix + "mail"} {
		if err := e.st.StateSet(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	out := newLatest[stateSnap]()
	s := newSharedState(e.st, time.Hour, e.log, time.Now, out)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	snap, ok := out.take()
	if !ok || !snap.ok || !snap.keys[store.StatePauseSupervisorPrefix+"exports"] || !snap.queues["mail"] || len(snap.queues) != 1 || snap.terminate {
		t.Fatalf("first snapshot %+v (%v)", snap, ok)
	}
}

// A terminate request counts only when it was made after the master's
// row was created; later rounds see a new one.
func TestSharedStateTerminateOnlyAfterTheMasterStarted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	ctx := context.Background()
	if err := e.st.StateSet(ctx, store.StateTerminate); err != nil {
		t.Fatal(err)
	}
	var startedAt time.Time
	if err := e.pool.QueryRow(ctx, `SELECT now() + interval '1 millisecond'`).Scan(&startedAt); err != nil {
		t.Fatal(err)
	}
	out := newLatest[stateSnap]()
	s := newSharedState(e.st, e.set.Tick, e.log, func() time.Time { return startedAt }, out)
	s.sig.read.Init()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	for _, snap := range s.sig.read.WaitFresh(t, 3) {
		if snap.terminate {
			t.Fatal("a terminate request older than the master counted")
		}
	}
	pollFor(t, "the database clock to pass the master's start", 5*time.Second, func() bool {
		return e.count(t, `SELECT count(*) FROM (SELECT 1 WHERE now() > $1) x`, startedAt) == 1
	})
	if err := e.st.StateSet(ctx, store.StateTerminate); err != nil {
		t.Fatal(err)
	}
	s.sig.read.Drain()
	for !s.sig.read.Wait(t).terminate {
	}
	if snap, ok := out.take(); !ok || !snap.terminate {
		t.Fatalf("the mailbox holds %+v (%v), want the latest snapshot, with the terminate", snap, ok)
	}
}
