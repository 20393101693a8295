package backoff_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/backoff"
	"github.com/fleet-go/fleet/internal/testwait"
)

func TestExponentialDoublesToMaxAndResets(t *testing.T) {
	t.Parallel()
	b := backoff.Exponential{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	if b.Current() != 0 {
		t.Fatalf("current before the first Next = %s, want 0", b.Current())
	}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v, want %v ms", got, want)
		}
	}
	if b.Current() != 50*time.Millisecond {
		t.Errorf("current = %s, want the last delay", b.Current())
	}
	b.Reset()
	if b.Current() != 0 || b.Next() != 10*time.Millisecond {
		t.Error("after a reset the next delay is not the base")
	}
}

func TestExponentialMaxBelowBase(t *testing.T) {
	t.Parallel()
	b := backoff.Exponential{Base: time.Second}
	first, second := b.Next(), b.Next()
	if first != time.Second || second != time.Second {
		t.Errorf("delays %s, %s; with no max the delay must stay at the base", first, second)
	}
}

func TestBetween(t *testing.T) {
	t.Parallel()
	seen := map[time.Duration]bool{}
	for range 2000 {
		d := backoff.Between(4, 7)
		if d < 4 || d > 7 {
			t.Fatalf("Between(4, 7) = %d", d)
		}
		seen[d] = true
	}
	if len(seen) != 4 {
		t.Errorf("Between(4, 7) gave %v, want each of 4..7", seen)
	}
	if d := backoff.Between(5, 5); d != 5 {
		t.Errorf("Between(5, 5) = %d", d)
	}
	if d := backoff.Between(9, 3); d != 9 {
		t.Errorf("Between(9, 3) = %d, want the lower bound", d)
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	if err := backoff.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("a whole sleep returned %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := backoff.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("an ended context: %v, want its error", err)
	}
	// An hour's sleep: a busy machine's delay is nothing beside it.
	if time.Since(start) > testwait.Hang {
		t.Error("a sleep on an ended context waited")
	}
	ctx, cancel = context.WithCancel(context.Background())
	go cancel()
	if err := backoff.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("a context ended during the sleep: %v", err)
	}
	if err := backoff.Sleep(context.Background(), 0); err != nil {
		t.Fatalf("a zero sleep: %v", err)
	}
}

// A retry loop: each failure waits longer, at random between half the
// delay and the delay, and a stop cuts the wait short.
func ExampleExponential() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	try := func(context.Context) error { return errors.New("the database is away") }
	b := backoff.Exponential{Base: 50 * time.Millisecond, Max: 5 * time.Second}
	for {
		if err := try(ctx); err == nil {
			return
		}
		d := b.Next()
		if err := backoff.Sleep(ctx, backoff.Between(d/2, d)); err != nil {
			return // stopped
		}
	}
}
