package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// dutyRow is a row of fleet_duties, as the tests read it.
type dutyRow struct {
	holder  string
	tries   int
	done    bool
	lastErr string
}

func readDuty(t *testing.T, pool *pgxpool.Pool, duty string, period time.Time) dutyRow {
	t.Helper()
	var r dutyRow
	if err := pool.QueryRow(context.Background(), `
		SELECT holder, tries, done_at IS NOT NULL, COALESCE(last_error, '')
		FROM fleet_duties WHERE duty = $1 AND period = $2`, duty, period).Scan(&r.holder, &r.tries, &r.done, &r.lastErr); err != nil {
		t.Fatalf("read duty %s of %s: %v", duty, period, err)
	}
	return r
}

// expireDuty makes the lease of (duty, period) lie in the past, as when its
// holder died or its retry backoff passed.
func expireDuty(t *testing.T, pool *pgxpool.Pool, duty string, period time.Time) {
	t.Helper()
	exec(t, pool, `UPDATE fleet_duties SET lease_until = now() - interval '1 millisecond' WHERE duty = $1 AND period = $2`, duty, period)
}

func claim(t *testing.T, st *store.Store, duty string, period time.Time, holder string, lease time.Duration) bool {
	t.Helper()
	won, err := st.DutyClaimPeriod(context.Background(), duty, period, holder, lease)
	if err != nil {
		t.Fatal(err)
	}
	return won
}

var dutyBase = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

func TestDutyClaimPeriodHasOneWinner(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	p := dutyBase
	var (
		mu      sync.Mutex
		winners []string
		wg      sync.WaitGroup
	)
	ready := make(chan struct{})
	for i := range 8 {
		holder := fmt.Sprintf("m%d", i)
		wg.Go(func() {
			<-ready
			won, err := st.DutyClaimPeriod(ctx, "metrics", p, holder, time.Minute)
			if err != nil {
				t.Error(err)
			}
			if won {
				mu.Lock()
				winners = append(winners, holder)
				mu.Unlock()
			}
		})
	}
	close(ready)
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("winners %v, want one", winners)
	}
	if r := readDuty(t, pool, "metrics", p); r.holder != winners[0] || r.tries != 1 || r.done {
		t.Fatalf("row %+v, want held by %s, one try, not done", r, winners[0])
	}
	if claim(t, st, "metrics", p, "other", time.Minute) {
		t.Fatal("a held period was claimed again")
	}
	if !claim(t, st, "metrics", p.Add(time.Minute), "other", time.Minute) {
		t.Fatal("the next period was not claimed")
	}
	if !claim(t, st, "partitions", p, "other", time.Minute) {
		t.Fatal("another duty of the same period was not claimed")
	}
	if _, err := st.DutyClaimPeriod(ctx, "metrics", p, "", time.Minute); err == nil {
		t.Fatal("a claim without a holder was accepted")
	}
	if _, err := st.DutyClaimPeriod(ctx, "metrics", p, "x", 0); err == nil {
		t.Fatal("a claim without a lease was accepted")
	}
}

func TestDutyClaimPeriodTakesOverADeadHolder(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	p := dutyBase
	if !claim(t, st, "metrics", p, "a", time.Minute) {
		t.Fatal("first claim lost")
	}
	if claim(t, st, "metrics", p, "b", time.Minute) {
		t.Fatal("claimed under a live lease")
	}
	expireDuty(t, pool, "metrics", p) // a died mid-duty
	if !claim(t, st, "metrics", p, "b", time.Minute) {
		t.Fatal("the period of a dead holder was not taken over")
	}
	if r := readDuty(t, pool, "metrics", p); r.holder != "b" || r.tries != 2 || r.done {
		t.Fatalf("row %+v, want held by b, two tries, not done", r)
	}
	if err := st.DutyDone(ctx, "metrics", p, "a"); !errors.Is(err, store.ErrDutyNotHeld) {
		t.Fatalf("done by the old holder = %v, want ErrDutyNotHeld", err)
	}
	if err := st.DutyFailed(ctx, "metrics", p, "a", "late"); !errors.Is(err, store.ErrDutyNotHeld) {
		t.Fatalf("failed by the old holder = %v, want ErrDutyNotHeld", err)
	}
	if err := st.DutyDone(ctx, "metrics", p, "b"); err != nil {
		t.Fatal(err)
	}
	if r := readDuty(t, pool, "metrics", p); !r.done || r.holder != "b" || r.lastErr != "" {
		t.Fatalf("row %+v, want done by b", r)
	}
	// Done is never claimed again, whatever its lease.
	expireDuty(t, pool, "metrics", p)
	if claim(t, st, "metrics", p, "c", time.Minute) {
		t.Fatal("a done period was claimed again")
	}
	if err := st.DutyDone(ctx, "metrics", p, "b"); !errors.Is(err, store.ErrDutyNotHeld) {
		t.Fatalf("done twice = %v, want ErrDutyNotHeld", err)
	}
	if err := st.DutyFailed(ctx, "metrics", p, "b", "x"); !errors.Is(err, store.ErrDutyNotHeld) {
		t.Fatalf("failed after done = %v, want ErrDutyNotHeld", err)
	}
	if r := readDuty(t, pool, "metrics", p); !r.done || r.tries != 2 || r.lastErr != "" {
		t.Fatalf("row %+v changed after done", r)
	}
	// A holder past its lease that nobody took over still finishes it.
	q := p.Add(time.Minute)
	claim(t, st, "metrics", q, "d", time.Minute)
	expireDuty(t, pool, "metrics", q)
	if err := st.DutyDone(ctx, "metrics", q, "d"); err != nil {
		t.Fatalf("done past the lease, not taken over = %v", err)
	}
}

func TestDutyFailedIsRetriedAfterABackoff(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	p := dutyBase
	backoff := func() time.Duration {
		// The lease of a failure runs from the failure, which is after the
		// claim: lease_until - claimed_at is at least the backoff.
		return time.Duration(scalar[int64](t, pool, `
			SELECT (EXTRACT(EPOCH FROM lease_until - claimed_at) * 1e6)::bigint
			FROM fleet_duties WHERE duty = 'metrics' AND period = $1`, p)) * time.Microsecond
	}
	claim(t, st, "metrics", p, "a", time.Minute)
	if err := st.DutyFailed(ctx, "metrics", p, "a", "boom"); err != nil {
		t.Fatal(err)
	}
	if r := readDuty(t, pool, "metrics", p); r.holder != "a" || r.lastErr != "boom" || r.done || r.tries != 1 {
		t.Fatalf("row %+v, want a's failure recorded", r)
	}
	if b := backoff(); b < store.DutyRetryStep {
		t.Fatalf("first failure backs off %v, want at least %v", b, store.DutyRetryStep)
	}
	expireDuty(t, pool, "metrics", p) // the backoff passed
	if due, err := st.DutyDue(ctx, "metrics", []time.Time{p}); err != nil || len(due) != 1 {
		t.Fatalf("due after the backoff = %v, %v; want the failed period", due, err)
	}
	if !claim(t, st, "metrics", p, "b", time.Minute) {
		t.Fatal("a failed period was not claimed again after its backoff")
	}
	if r := readDuty(t, pool, "metrics", p); r.holder != "b" || r.tries != 2 || r.lastErr != "boom" {
		t.Fatalf("row %+v, want b's second try, the last error kept", r)
	}
	if err := st.DutyFailed(ctx, "metrics", p, "b", "boom again"); err != nil {
		t.Fatal(err)
	}
	if b := backoff(); b < 2*store.DutyRetryStep {
		t.Fatalf("second failure backs off %v, want at least %v", b, 2*store.DutyRetryStep)
	}
	// The backoff is capped.
	exec(t, pool, `UPDATE fleet_duties SET tries = 1000, lease_until = now() - interval '1 millisecond'`)
	claim(t, st, "metrics", p, "c", time.Minute)
	if err := st.DutyFailed(ctx, "metrics", p, "c", "and again"); err != nil {
		t.Fatal(err)
	}
	if b := backoff(); b < store.DutyRetryMax {
		t.Fatalf("capped backoff %v, want at least %v", b, store.DutyRetryMax)
	}
	if !scalar[bool](t, pool, `SELECT lease_until <= now() + $1 * interval '1 microsecond' FROM fleet_duties`, store.DutyRetryMax.Microseconds()) {
		t.Fatalf("backoff past the cap of %v", store.DutyRetryMax)
	}
	if err := st.DutyDone(ctx, "metrics", p, "c"); err != nil {
		t.Fatalf("done after a failure = %v", err)
	}
}

func TestDutyDueListsUndoneUnleasedPeriods(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	p := make([]time.Time, 6)
	for i := range p {
		p[i] = dutyBase.Add(time.Duration(i) * time.Minute)
	}
	claim(t, st, "metrics", p[0], "a", time.Minute) // done
	if err := st.DutyDone(ctx, "metrics", p[0], "a"); err != nil {
		t.Fatal(err)
	}
	claim(t, st, "metrics", p[1], "a", time.Hour) // held
	claim(t, st, "metrics", p[2], "a", time.Hour) // its holder died
	expireDuty(t, pool, "metrics", p[2])
	claim(t, st, "metrics", p[3], "a", time.Hour) // failed, backoff over
	if err := st.DutyFailed(ctx, "metrics", p[3], "a", "boom"); err != nil {
		t.Fatal(err)
	}
	expireDuty(t, pool, "metrics", p[3])
	claim(t, st, "metrics", p[4], "a", time.Hour) // failed, backing off
	if err := st.DutyFailed(ctx, "metrics", p[4], "a", "boom"); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `UPDATE fleet_duties SET lease_until = now() + interval '1 hour' WHERE period = $1`, p[4])
	// p[5] was never claimed; another duty's done row changes nothing.
	claim(t, st, "partitions", p[5], "a", time.Hour)
	if err := st.DutyDone(ctx, "partitions", p[5], "a"); err != nil {
		t.Fatal(err)
	}
	due, err := st.DutyDue(ctx, "metrics", append([]time.Time{p[5]}, p...))
	if err != nil {
		t.Fatal(err)
	}
	if want := []time.Time{p[2], p[3], p[5]}; !slices.EqualFunc(due, want, time.Time.Equal) {
		t.Fatalf("due %v, want %v", due, want)
	}
	if due, err := st.DutyDue(ctx, "metrics", nil); err != nil || len(due) != 0 {
		t.Fatalf("due of no periods = %v, %v", due, err)
	}
}

func TestDutyRecentReadsTheLatestCompletePeriods(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	// The store's clock stands still: the window does not move between
	// the reads.
	st, _ := onClock(store.New(pool), clockMinute(t, pool).Add(30*time.Second))
	ctx := context.Background()
	// Alignment and completeness hold within one read of the clock.
	for _, every := range []time.Duration{time.Minute, 10 * time.Minute, time.Hour} {
		const settle = 3 * time.Second
		w, err := st.DutyRecent(ctx, store.DutyRecentParams{Duty: "metrics", Every: every, Back: 5, Settle: settle})
		if err != nil {
			t.Fatal(err)
		}
		if len(w.Periods) != 5 {
			t.Fatalf("every %v: %d periods, want 5", every, len(w.Periods))
		}
		for i, p := range w.Periods {
			if !p.Period.Truncate(every).Equal(p.Period) || p.Period.UTC().Unix()%int64(every/time.Second) != 0 {
				t.Errorf("every %v: period %s not aligned", every, p.Period)
			}
			if i > 0 && !p.Period.Equal(w.Periods[i-1].Period.Add(every)) {
				t.Errorf("every %v: period %s does not follow %s", every, p.Period, w.Periods[i-1].Period)
			}
			if p.Done || !p.LeaseUntil.IsZero() || p.Tries != 0 {
				t.Errorf("every %v: fresh period %+v", every, p)
			}
		}
		last := w.Periods[4].Period
		if end := last.Add(every); end.After(w.Now.Add(-settle)) || !end.Add(every).After(w.Now.Add(-settle)) {
			t.Errorf("every %v: latest period ends %s, read at %s: not the latest complete one", every, end, w.Now)
		}
		if want := last.Add(2 * every).Add(settle); !w.Next.Equal(want) {
			t.Errorf("every %v: next %s, want %s", every, w.Next, want)
		}
		if len(w.Due()) != 5 || !w.Wake().Equal(w.Next) {
			t.Errorf("every %v: due %v, wake %s", every, w.Due(), w.Wake())
		}
	}
	// States, with hours.
	read := func() store.DutyWindow {
		t.Helper()
		w, err := st.DutyRecent(ctx, store.DutyRecentParams{Duty: "metrics", Every: time.Hour, Back: 5})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := read()
	p := []time.Time{w.Periods[1].Period, w.Periods[2].Period, w.Periods[3].Period}
	claim(t, st, "metrics", p[0], "a", time.Hour)
	if err := st.DutyDone(ctx, "metrics", p[0], "a"); err != nil {
		t.Fatal(err)
	}
	claim(t, st, "metrics", p[1], "a", 2*time.Hour)
	claim(t, st, "metrics", p[2], "a", time.Hour)
	expireDuty(t, pool, "metrics", p[2])
	w = read()
	by := map[time.Time]store.DutyPeriod{}
	var want []time.Time
	for _, dp := range w.Periods {
		by[dp.Period.UTC()] = dp
		if !dp.Period.Equal(p[0]) && !dp.Period.Equal(p[1]) {
			want = append(want, dp.Period)
		}
	}
	if d := by[p[0].UTC()]; !d.Done || d.Tries != 1 {
		t.Errorf("done period %+v", d)
	}
	if d := by[p[1].UTC()]; d.Done || !d.LeaseUntil.After(w.Now) || d.Tries != 1 {
		t.Errorf("held period %+v", d)
	}
	if d := by[p[2].UTC()]; d.Done || d.LeaseUntil.After(w.Now) || d.LeaseUntil.IsZero() || d.Tries != 1 {
		t.Errorf("expired period %+v", d)
	}
	if due := w.Due(); !slices.EqualFunc(due, want, time.Time.Equal) {
		t.Errorf("due %v, want %v", due, want)
	}
	if _, err := st.DutyRecent(ctx, store.DutyRecentParams{Duty: "metrics", Every: time.Minute}); err == nil {
		t.Error("a window of no periods was accepted")
	}
}

func TestDutyWindowDueAndWake(t *testing.T) {
	t.Parallel()
	now := dutyBase.Add(30 * time.Second)
	w := store.DutyWindow{Now: now, Next: dutyBase.Add(time.Minute + 3*time.Second), Periods: []store.DutyPeriod{
		{Period: dutyBase.Add(-4 * time.Minute), Done: true, LeaseUntil: now.Add(-time.Minute), Tries: 1},
		{Period: dutyBase.Add(-3 * time.Minute), Done: true, LeaseUntil: now.Add(time.Second), Tries: 1}, // done: its lease does not count
		{Period: dutyBase.Add(-2 * time.Minute), LeaseUntil: now.Add(20 * time.Second), Tries: 1},        // held
		{Period: dutyBase.Add(-time.Minute), LeaseUntil: now, Tries: 2},                                  // lease just over
		{Period: dutyBase},
	}}
	if due, want := w.Due(), []time.Time{dutyBase.Add(-time.Minute), dutyBase}; !slices.EqualFunc(due, want, time.Time.Equal) {
		t.Errorf("due %v, want %v", due, want)
	}
	if wake := w.Wake(); !wake.Equal(now.Add(20 * time.Second)) {
		t.Errorf("wake %s, want the end of the held lease", wake)
	}
	w.Periods[2].LeaseUntil = w.Next.Add(time.Second)
	if wake := w.Wake(); !wake.Equal(w.Next) {
		t.Errorf("wake %s, want the next period's end %s", wake, w.Next)
	}
}

func TestDutyTrimDeletesOldPeriods(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	exec(t, pool, `
		INSERT INTO fleet_duties (duty, period, holder, lease_until, done_at) VALUES
			('metrics', now() - interval '2 days', 'a', now(), now()),
			('partitions', now() - interval '25 hours', 'a', now(), NULL),
			('metrics', now() - interval '1 hour', 'a', now(), now()),
			('metrics', now() - interval '1 minute', 'a', now(), NULL)`)
	n, err := st.DutyTrim(ctx, 24*time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("trim = %d, %v; want the two older than a day", n, err)
	}
	if left := scalar[int](t, pool, `SELECT count(*) FROM fleet_duties WHERE period > now() - interval '1 day'`); left != 2 {
		t.Fatalf("%d recent rows left, want 2", left)
	}
	if _, err := st.DutyTrim(ctx, 0); err == nil {
		t.Fatal("a trim of everything was accepted")
	}
}
