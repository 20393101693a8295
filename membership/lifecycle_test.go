package membership_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/membership"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// TestServiceLifecycle: the membership is a lifecycle service named
// "membership" (the member's own name is MemberName); a second Start and a
// Start after Stop fail as the lifecycle says; Stop, from several
// goroutines at once, ends the beat's goroutine and leaves; the view's age
// is read on Config.Now. It runs alone, so that goleak sees only its own
// goroutines.
func TestServiceLifecycle(t *testing.T) {
	// Not parallel: it checks for goroutines left, and the other tests
	// would have theirs.
	pool := pgtest.Pool(t)
	st := store.New(pool)
	ctx := context.Background()
	if _, err := st.MemberView(ctx); err != nil { // the pool's connection: part of the baseline
		t.Fatal(err)
	}
	baseline := goleak.IgnoreCurrent()
	var mu sync.Mutex
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	s, err := membership.New(st, membership.Config{Name: "lc", TTL: time.Second, Interval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	var _ lifecycle.Service = s
	if s.Name() != "membership" || s.MemberName() != "lc" {
		t.Fatalf("Name %q, MemberName %q", s.Name(), s.MemberName())
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); !errors.Is(err, lifecycle.ErrStarted) {
		t.Fatalf("a second Start: %v", err)
	}
	if s.StartedAt().IsZero() {
		t.Error("no StartedAt after Start")
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(s.Stop)
	}
	wg.Wait()
	if err := s.LeaveErr(); err != nil {
		t.Fatal(err)
	}
	if v, err := st.MemberView(ctx); err != nil {
		t.Fatal(err)
	} else if _, ok := v.Find(s.Instance()); ok {
		t.Error("the row outlived Stop")
	}
	// No beat after Stop: the view's age is the clock's alone.
	if age := s.ViewAge(); age != 0 {
		t.Errorf("view age %s on a clock that did not move", age)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if age := s.ViewAge(); age != time.Hour {
		t.Errorf("view age %s after the clock moved an hour", age)
	}
	if err := s.Start(ctx); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Start after Stop: %v", err)
	}
	if err := goleak.Find(baseline); err != nil {
		t.Fatalf("goroutines left after Stop: %v", err)
	}
}
