package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// A renewing beat renews the member's row and never inserts one: a beat
// that reaches the server after the member left does not bring its row
// back. A beat without Renew writes the row again.
func TestMemberBeatRenewNeverInserts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(pgtest.Pool(t))
	p := store.MemberBeatParams{Instance: "i1", Name: "m", Host: "h", PID: 1, State: "running", TTL: time.Minute}
	if _, err := st.MemberBeat(ctx, store.MemberBeatParams{Instance: "i2", Name: "peer", Host: "h", PID: 2, State: "running", TTL: time.Minute}, false); err != nil {
		t.Fatal(err)
	}
	v, err := st.MemberBeat(ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	first, ok := v.Find("i1")
	if !ok {
		t.Fatal("the first beat wrote no row")
	}
	p.Renew, p.State = true, "draining"
	v, err = st.MemberBeat(ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := v.Find("i1"); !ok || m.State != "draining" || !m.BeatAt.After(first.BeatAt) || v.Prev != first.BeatAt {
		t.Fatalf("a renewing beat of a row there is: %+v (found %v, prev %v), want it renewed as draining after %v", m, ok, v.Prev, first.BeatAt)
	}
	if err := st.MemberDelete(ctx, "i1"); err != nil {
		t.Fatal(err)
	}
	v, err = st.MemberBeat(ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v.Find("i1"); ok || !v.Prev.IsZero() {
		t.Fatalf("a renewing beat after the leave: view %+v, want no row of i1", v)
	}
	if _, ok := v.Find("i2"); !ok {
		t.Fatalf("a renewing beat after the leave: view %+v lacks the peer", v)
	}
	if v, err = st.MemberView(ctx); err != nil {
		t.Fatal(err)
	} else if _, ok := v.Find("i1"); ok {
		t.Fatal("a renewing beat after the leave brought the row back")
	}
	p.Renew = false
	if v, err = st.MemberBeat(ctx, p, false); err != nil {
		t.Fatal(err)
	} else if _, ok := v.Find("i1"); !ok {
		t.Fatal("a beat without Renew did not write the row again")
	}
}
