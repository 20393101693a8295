package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

func periodicJob(tick time.Time) store.JobInsertParams {
	return store.JobInsertParams{Queue: "ticks", Name: "report", Payload: []byte(`{"tick":"` + tick.UTC().Format(time.RFC3339) + `"}`)}
}

func TestPeriodicEnsureStartsAtNow(t *testing.T) {
	t.Parallel()
	st := store.New(pgtest.Pool(t))
	ctx := context.Background()
	if n, err := st.PeriodicEnsure(ctx, []string{"a", "b"}); err != nil || n != 2 {
		t.Fatalf("ensure: %d, %v", n, err)
	}
	if n, err := st.PeriodicEnsure(ctx, []string{"a", "b", "c"}); err != nil || n != 1 {
		t.Fatalf("ensure again: %d, %v; want only c created", n, err)
	}
	v, err := st.PeriodicRead(ctx, []string{"a", "c", "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.States) != 2 || v.States[0].Name != "a" || v.States[1].Name != "c" {
		t.Fatalf("read: %+v", v.States)
	}
	for _, s := range v.States {
		if s.Cursor.After(v.Now) || v.Now.Sub(s.Cursor) > time.Minute || s.LastTick != nil || s.LastJobID != nil {
			t.Errorf("new schedule %s: %+v at %v", s.Name, s, v.Now)
		}
	}
	if v, err := st.PeriodicRead(ctx, []string{"nope"}); err != nil || len(v.States) != 0 || v.Now.IsZero() {
		t.Fatalf("read of none: %+v, %v", v, err)
	}
}

// Many masters doing the same round at once: exactly one moves the cursor
// and dispatches, the others write nothing.
func TestPeriodicDispatchHasOneWinner(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	if _, err := st.PeriodicEnsure(ctx, []string{"report"}); err != nil {
		t.Fatal(err)
	}
	v, err := st.PeriodicRead(ctx, []string{"report"})
	if err != nil {
		t.Fatal(err)
	}
	from := v.States[0].Cursor
	t1, t2 := from.Truncate(time.Second).Add(time.Second), from.Truncate(time.Second).Add(2*time.Second)
	var wg sync.WaitGroup
	results := make([]store.PeriodicDispatched, 16)
	errs := make([]error, 16)
	for i := range results {
		wg.Go(func() {
			results[i], errs[i] = st.PeriodicDispatch(ctx, store.PeriodicDispatchParams{
				Name: "report", From: from, To: t2, Ticks: []time.Time{t1, t2},
				Jobs: []store.JobInsertParams{periodicJob(t1), periodicJob(t2)}, By: "m" + string(rune('a'+i)),
			})
		})
	}
	wg.Wait()
	won := 0
	var ids []int64
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("dispatch %d: %v", i, errs[i])
		}
		if r.Won {
			won++
			ids = r.IDs
		} else if len(r.IDs) != 0 {
			t.Errorf("a loser got ids %v", r.IDs)
		}
	}
	if won != 1 || len(ids) != 2 {
		t.Fatalf("%d winners (ids %v), want 1 with 2 jobs", won, ids)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM queue_jobs WHERE queue = 'ticks'`); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
	ticks, err := st.PeriodicTicks(ctx, "report", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ticks) != 2 || !ticks[0].Tick.Equal(t2) || ticks[0].JobID != ids[1] || !ticks[1].Tick.Equal(t1) || ticks[1].JobID != ids[0] {
		t.Fatalf("ticks: %+v, ids %v", ticks, ids)
	}
	v, err = st.PeriodicRead(ctx, []string{"report"})
	if err != nil {
		t.Fatal(err)
	}
	s := v.States[0]
	if !s.Cursor.Equal(t2) || s.LastTick == nil || !s.LastTick.Equal(t2) || s.LastJobID == nil || *s.LastJobID != ids[1] {
		t.Fatalf("state after: %+v", s)
	}

	// A round from a stale cursor writes nothing.
	r, err := st.PeriodicDispatch(ctx, store.PeriodicDispatchParams{
		Name: "report", From: from, To: t2.Add(time.Second), Ticks: []time.Time{t2.Add(time.Second)},
		Jobs: []store.JobInsertParams{periodicJob(t2.Add(time.Second))}, By: "late",
	})
	if err != nil || r.Won {
		t.Fatalf("stale round: %+v, %v", r, err)
	}
	// Skipping moves the cursor without a job, and keeps the last tick.
	r, err = st.PeriodicDispatch(ctx, store.PeriodicDispatchParams{Name: "report", From: t2, To: t2.Add(time.Hour), By: "m"})
	if err != nil || !r.Won {
		t.Fatalf("skip: %+v, %v", r, err)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM queue_jobs WHERE queue = 'ticks'`); n != 2 {
		t.Fatalf("%d jobs after a skip, want 2", n)
	}
	v, _ = st.PeriodicRead(ctx, []string{"report"})
	if s := v.States[0]; !s.Cursor.Equal(t2.Add(time.Hour)) || !s.LastTick.Equal(t2) {
		t.Fatalf("state after a skip: %+v", s)
	}
}

// A failure inside the round (here the jobs' insert) rolls everything
// back: the cursor stays, no tick is recorded.
func TestPeriodicDispatchIsAllOrNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	if _, err := st.PeriodicEnsure(ctx, []string{"report"}); err != nil {
		t.Fatal(err)
	}
	v, _ := st.PeriodicRead(ctx, []string{"report"})
	from := v.States[0].Cursor
	tick := from.Truncate(time.Second).Add(time.Second)
	bad := store.JobInsertParams{Queue: "ticks", Name: "report", Payload: []byte(`not json`)}
	if _, err := st.PeriodicDispatch(ctx, store.PeriodicDispatchParams{Name: "report", From: from, To: tick, Ticks: []time.Time{tick}, Jobs: []store.JobInsertParams{bad}, By: "m"}); err == nil {
		t.Fatal("a bad job: no error")
	}
	v, _ = st.PeriodicRead(ctx, []string{"report"})
	if !v.States[0].Cursor.Equal(from) || scalar[int64](t, pool, `SELECT count(*) FROM fleet_periodic_ticks`) != 0 || scalar[int64](t, pool, `SELECT count(*) FROM queue_jobs`) != 0 {
		t.Fatalf("after a failed round: %+v", v.States[0])
	}
	// The same tick, recorded already, is refused by the key even from a
	// cursor that would allow it.
	r, err := st.PeriodicDispatch(ctx, store.PeriodicDispatchParams{Name: "report", From: from, To: tick, Ticks: []time.Time{tick}, Jobs: []store.JobInsertParams{periodicJob(tick)}, By: "m"})
	if err != nil || !r.Won {
		t.Fatalf("round: %+v, %v", r, err)
	}
	exec(t, pool, `UPDATE fleet_periodic SET cursor_at = $1`, from)
	if _, err := st.PeriodicDispatch(ctx, store.PeriodicDispatchParams{Name: "report", From: from, To: tick, Ticks: []time.Time{tick}, Jobs: []store.JobInsertParams{periodicJob(tick)}, By: "m"}); err == nil {
		t.Fatal("a tick dispatched twice: no error")
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM queue_jobs`); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	if _, err := st.PeriodicDispatch(ctx, store.PeriodicDispatchParams{Name: "nope", From: from, To: tick, By: "m"}); !errors.Is(err, store.ErrPeriodicNotFound) {
		t.Fatalf("unknown schedule: %v", err)
	}
	exec(t, pool, `INSERT INTO fleet_periodic_ticks (name, tick, job_id, dispatched_by) VALUES ('report', now() - interval '2 days', 1, 'm')`)
	if n, err := st.PeriodicTickTrim(ctx, 24*time.Hour); err != nil || n != 1 {
		t.Fatalf("trim: %d, %v; want the old tick only", n, err)
	}
}

// A round inserts its jobs with every option they carry, as a dispatch
// does: priority, tries, backoff, timeout, tags, metadata, and a limit
// under which the ticks beyond the limit wait, parked.
func TestPeriodicDispatchCarriesJobOptions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	if _, err := st.PeriodicEnsure(ctx, []string{"report"}); err != nil {
		t.Fatal(err)
	}
	v, err := st.PeriodicRead(ctx, []string{"report"})
	if err != nil {
		t.Fatal(err)
	}
	from := v.States[0].Cursor
	ticks := []time.Time{from.Truncate(time.Second).Add(time.Second), from.Truncate(time.Second).Add(2 * time.Second)}
	jobs := make([]store.JobInsertParams, len(ticks))
	for i, tick := range ticks {
		jobs[i] = periodicJob(tick)
		jobs[i].Priority, jobs[i].MaxTries, jobs[i].BackoffSecs, jobs[i].Timeout = -5, 3, []int{10, 60}, 2*time.Minute
		jobs[i].Tags, jobs[i].Metadata, jobs[i].LimitKey, jobs[i].Limit = []string{"nightly"}, []byte(`{"team":"ops"}`), "reports", 1
	}
	r, err := st.PeriodicDispatch(ctx, store.PeriodicDispatchParams{Name: "report", From: from, To: ticks[1], Ticks: ticks, Jobs: jobs, By: "m"})
	if err != nil || !r.Won || len(r.IDs) != 2 {
		t.Fatalf("round: %+v, %v", r, err)
	}
	rows, err := pool.Query(ctx, `
		SELECT id, priority, max_tries, backoff_secs, timeout_ms, tags, metadata->>'team', limit_key, limit_n, available_at = 'infinity'
		FROM queue_jobs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var parked []bool
	for rows.Next() {
		var id, timeout int64
		var priority, tries, limit int
		var backoff []int32
		var tags []string
		var team, key string
		var isParked bool
		if err := rows.Scan(&id, &priority, &tries, &backoff, &timeout, &tags, &team, &key, &limit, &isParked); err != nil {
			t.Fatal(err)
		}
		if priority != -5 || tries != 3 || len(backoff) != 2 || backoff[0] != 10 || backoff[1] != 60 || timeout != 120_000 ||
			len(tags) != 1 || tags[0] != "nightly" || team != "ops" || key != "reports" || limit != 1 {
			t.Errorf("job %d: priority %d, tries %d, backoff %v, timeout %d ms, tags %v, team %q, limit %q %d",
				id, priority, tries, backoff, timeout, tags, team, key, limit)
		}
		parked = append(parked, isParked)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(parked) != 2 || parked[0] || !parked[1] {
		t.Fatalf("parked %v: want the first tick's job ready and the second's waiting for the key's one slot", parked)
	}
}
