package membership_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/membership"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// syncBuffer is a log or output sink safe for concurrent writes.
type syncBuffer = syncbuf.Buffer

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ttl, interval time.Duration
		ok            bool
	}{
		{10 * time.Second, time.Second, true},
		{3 * time.Second, 1499 * time.Millisecond, true},
		{3 * time.Second, 1500 * time.Millisecond, false},
		{time.Second, 0, false},
	} {
		if err := membership.Validate(tt.ttl, tt.interval); (err == nil) != tt.ok {
			t.Errorf("Validate(%s, %s) = %v, want ok %v", tt.ttl, tt.interval, err, tt.ok)
		}
	}
	for name, ok := range map[string]bool{"web-1": true, "pod:7": true, "": false, "  ": false, "a\tb": false, "a\nb": false, "{x}": false} {
		if err := membership.ValidName(name); (err == nil) != ok {
			t.Errorf("ValidName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

func TestReportOverTheCapIsABootError(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s, err := membership.New(store.New(pool), membership.Config{Name: "big",
		Report: func() (string, any) { return "running", strings.Repeat("x", membership.MaxReportBytes) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "membership report is") {
		t.Fatalf("Start = %v, want the report refused", err)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM fleet_masters`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows = %d (%v): nothing may be written", n, err)
	}
	s.Stop() // safe without a loop, and leaves nothing
	if err := s.LeaveErr(); err != nil {
		t.Fatalf("Stop after a failed Start: %v", err)
	}
}

func TestShareSumsToTheBudgetAndRankIsStable(t *testing.T) {
	t.Parallel()
	members := []store.Member{{Instance: "a"}, {Instance: "b"}, {Instance: "c"}}
	for total := 0; total <= 10; total++ {
		sum := 0
		for _, m := range members {
			sum += membership.Share("sup", total, members, m.Instance)
		}
		if sum != total {
			t.Errorf("shares of %d sum to %d", total, sum)
		}
	}
	if membership.Share("sup", 6, members, "stranger") != 0 {
		t.Error("a non-member got a share")
	}
	r1 := membership.Rank("sup", members)
	r2 := membership.Rank("sup", []store.Member{members[2], members[0], members[1]})
	for i := range r1 {
		if r1[i].Instance != r2[i].Instance {
			t.Fatalf("rank depends on input order: %v vs %v", r1, r2)
		}
	}
}

// Each member sees the others in its view, with the database clock, and
// a stop leaves (deletes the row) or lingers.
func TestViewAndLeave(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	mk := func(name string, linger time.Duration) *membership.Service {
		s, err := membership.New(st, membership.Config{Name: name, TTL: time.Second, Interval: 50 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler), Linger: linger})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := mk("a", time.Minute), mk("b", 0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := a.View()
		if m, ok := v.Find(b.Instance()); ok && m.Liveness(v.At) == store.LivenessOnline {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a never saw b online")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Stop()
	if err := b.LeaveErr(); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	if err := b.LeaveErr(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	a.Stop()
	if err := a.LeaveErr(); err != nil {
		t.Fatal(err)
	}
	v, err := st.MemberView(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v.Find(b.Instance()); ok {
		t.Error("b left but its row is there")
	}
	if m, ok := v.Find(a.Instance()); !ok || m.Liveness(v.At) != store.LivenessDraining {
		t.Errorf("a lingers: row %+v, want draining", m)
	}
}

// A beat that cannot get through (a lock on the table) keeps the last view,
// is counted, and is logged once for the whole streak; trust is lost and
// comes back only after a whole ttl of good beats.
func TestBeatFailuresAreCountedAndLoggedOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	logs := &syncBuffer{}
	// A ttl and beat interval Slack times an idle machine's, so that a
	// loaded machine's beats still pass within their time limit: a failed
	// beat would lose trust on its own and prove nothing here.
	const ttl = testwait.Slack * 600 * time.Millisecond
	s, err := membership.New(store.New(pool), membership.Config{Name: "m", TTL: ttl, Interval: testwait.Slack * 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitFor(t, "trust", s.Trusted)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE fleet_masters IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three failed beats", func() bool { return s.BeatErrors() >= 3 })
	if s.Trusted() {
		t.Error("still trusted while beats fail")
	}
	if s.View().At.IsZero() {
		t.Error("the last view was dropped")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "trust again", s.Trusted)
	if n := strings.Count(logs.String(), "beat failed"); n != 1 {
		t.Errorf("%d 'beat failed' lines for one streak, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "beat succeeded again") {
		t.Error("no line when beats succeed again")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, 15*time.Second, what, cond)
}

// A beat that finds its own row older than its last acknowledged beat
// (the database lost acknowledged writes, as a failover to a standby that
// lagged does) loses trust, though no beat failed: the other rows lost
// their latest beats too and may look expired. Trust comes back after a
// whole ttl of good beats.
func TestLostBeatsLoseTrust(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	logs := &syncBuffer{}
	// A ttl and beat interval Slack times an idle machine's, so that a
	// loaded machine's beats still pass within their time limit: a failed
	// beat would lose trust on its own and prove nothing here.
	const ttl = testwait.Slack * 600 * time.Millisecond
	s, err := membership.New(store.New(pool), membership.Config{Name: "m", TTL: ttl, Interval: testwait.Slack * 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitFor(t, "trust", s.Trusted)
	// The row as a standby 2 s behind has it.
	if _, err := pool.Exec(ctx, `UPDATE fleet_masters SET beat_at = beat_at - interval '2 seconds',
		expires_at = expires_at - interval '2 seconds' WHERE instance = $1`, s.Instance()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lost beats noticed", func() bool { return strings.Contains(logs.String(), "the database lost beats") })
	if s.Trusted() {
		t.Error("still trusted after the database lost its beats")
	}
	if s.BeatErrors() != 0 {
		t.Errorf("%d beat errors: the test proves nothing", s.BeatErrors())
	}
	waitFor(t, "trust again", s.Trusted)
	if n := strings.Count(logs.String(), "the database lost beats"); n != 1 {
		t.Errorf("%d lines about lost beats, want 1:\n%s", n, logs.String())
	}
}

// A member whose row is gone (a standby that never had it, or peers that
// pruned it while the process was frozen) writes it again at its next
// beat, though its beats after the first only renew a row there is, and
// loses trust as for lost beats.
func TestVanishedRowIsWrittenAgain(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	logs := &syncBuffer{}
	const ttl = testwait.Slack * 600 * time.Millisecond
	s, err := membership.New(store.New(pool), membership.Config{Name: "m", TTL: ttl, Interval: testwait.Slack * 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitFor(t, "trust", s.Trusted)
	if _, err := pool.Exec(ctx, `DELETE FROM fleet_masters WHERE instance = $1`, s.Instance()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the vanished row noticed", func() bool { return strings.Contains(logs.String(), "the database lost beats") })
	waitFor(t, "the row written again", func() bool {
		v, err := store.New(pool).MemberView(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := v.Find(s.Instance())
		return ok
	})
	waitFor(t, "trust again", s.Trusted)
}

// A beat the database answers with a statement timeout (or a deadlock) is
// tried again within the beat's time limit, not given up until the next
// interval: three timed-out statements in a row cost the first beat
// nothing but three retries, and the row is written.
func TestBeatRetriesAStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	for _, sql := range []string{
		`CREATE SEQUENCE slow_beat`,
		`CREATE FUNCTION slow_beat() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		     IF nextval('slow_beat') <= 3 THEN
		         RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = '57014';
		     END IF;
		     RETURN NULL;
		 END $$`,
		`CREATE TRIGGER slow_beat BEFORE INSERT ON fleet_masters FOR EACH STATEMENT EXECUTE FUNCTION slow_beat()`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	s, err := membership.New(store.New(pool), membership.Config{Name: "slow", TTL: time.Hour, Interval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("first beat: %v", err)
	}
	defer s.Stop()
	if s.BeatRetries() != 3 || s.BeatErrors() != 0 {
		t.Errorf("%d retries and %d failed beats, want 3 and 0", s.BeatRetries(), s.BeatErrors())
	}
	if _, ok := s.View().Find(s.Instance()); !ok {
		t.Error("the first beat wrote no row")
	}
}
