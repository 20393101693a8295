// Package backoff is how fleet waits before trying again: an exponential
// delay that a success resets, a random spread so that many processes that
// failed together do not retry in step, and a sleep that a context cuts
// short.
//
// A typical retry loop:
//
//	b := backoff.Exponential{Base: 50 * time.Millisecond, Max: 5 * time.Second}
//	for {
//		if err := try(ctx); err == nil {
//			return nil
//		}
//		d := b.Next()
//		if err := backoff.Sleep(ctx, backoff.Between(d/2, d)); err != nil {
//			return err
//		}
//	}
//
// It holds no clock and no service: a caller that schedules rather than
// sleeps (the master's crash backoff) adds the delay to its own clock's
// now.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Exponential is a delay that starts at Base and doubles with each Next,
// up to Max. The zero delay state is ready: the first Next returns Base.
// It is not safe for concurrent use; each retry loop holds its own.
type Exponential struct {
	// Base is the first delay; Max caps the doubling (a Max below Base
	// is taken as Base).
	Base, Max time.Duration

	cur time.Duration
}

// Next returns the delay before the next try: Base after a Reset (and the
// first time), then twice the delay before, at most Max.
func (e *Exponential) Next() time.Duration {
	if e.cur == 0 {
		e.cur = e.Base
	} else {
		e.cur = min(e.cur*2, max(e.Max, e.Base))
	}
	return e.cur
}

// Current is the delay Next returned last (0 before the first Next and
// after a Reset).
func (e *Exponential) Current() time.Duration { return e.cur }

// Reset makes the next Next return Base again: call it after a success.
func (e *Exponential) Reset() { e.cur = 0 }

// Between returns a random duration from lo to hi, both included; lo when
// hi is not above it.
func Between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo+1)
}

// Sleep waits d, or until ctx ends, whichever comes first. It returns nil
// after the whole wait, and ctx's error when ctx ended first (at once when
// it had already ended, whatever d).
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
