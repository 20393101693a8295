package periodic

import (
	"slices"
	"time"
)

// Round is what a master knows of one schedule when it decides: the
// schedule, its cursor and the database's clock.
type Round struct {
	Schedule Schedule
	// Cursor is the schedule's cursor: every tick at or before it has been
	// decided (dispatched or skipped) by some master.
	Cursor time.Time
	// Now is the database's clock.
	Now time.Time
	// Grace is how late a tick may be and still be on time: a tick older
	// than that when a master first sees it was missed (no master ran to
	// dispatch it in time).
	Grace time.Duration
}

// Plan is what Decide decides for one round of one schedule.
type Plan struct {
	// Dispatch are the ticks to dispatch now, oldest first.
	Dispatch []time.Time
	// Cursor is the schedule's cursor once Dispatch is dispatched: the
	// latest tick that came due. It equals the round's cursor when no tick
	// came due (Advance is false), and nothing needs writing.
	Cursor  time.Time
	Advance bool
	// FirstMissed and LastMissed bound the missed ticks (older than the
	// grace), zero when there were none; whether they are dispatched is
	// the catch-up's say.
	FirstMissed, LastMissed time.Time
	// Skipped tells whether some missed ticks are not dispatched.
	Skipped bool
	// Next is the schedule's first tick after Now (zero: none within five
	// years).
	Next time.Time
}

// maxOnTime bounds the on-time ticks of one round: a grace of a ttl holds
// a few of an @every 1s schedule; this is only a guard.
const maxOnTime = 1000

// Decide decides one round of one schedule: which ticks that came due
// after the cursor (up to and including now) are dispatched, and where the
// cursor moves.
//
// A due tick is on time when it is at most Grace old: it is dispatched
// whatever the catch-up. Older due ticks were missed: catch-up none skips
// them; last dispatches the latest of them unless a tick on time is
// dispatched in the same round; all dispatches the latest CatchUpMax of
// them and skips any older. Either way the cursor moves to the latest
// due tick, so each tick is decided once.
//
// The cost grows with the ticks dispatched, not with how long ago the
// cursor is: missed ticks are looked for backwards from now in windows
// that double.
func Decide(r Round) Plan {
	spec := r.Schedule.Spec
	now := r.Now
	cursor := r.Cursor
	if cursor.IsZero() || cursor.After(now) {
		return Plan{Cursor: r.Cursor, Next: spec.Next(now)}
	}
	p := Plan{Cursor: cursor, Next: spec.Next(now)}
	edge := now.Add(-r.Grace) // ticks after it are on time
	if edge.Before(cursor) {
		edge = cursor
	}
	onTime, _ := latest(spec, edge, now, maxOnTime)
	if first := spec.Next(cursor); !first.IsZero() && !first.After(edge) {
		p.FirstMissed = first
		want := 1
		if r.Schedule.CatchUp == CatchUpAll {
			want = max(r.Schedule.CatchUpMax, 1)
		}
		missed, more := latest(spec, cursor, edge, want)
		p.LastMissed = missed[len(missed)-1]
		switch r.Schedule.CatchUp {
		case CatchUpAll:
			p.Dispatch = append(p.Dispatch, missed...)
			p.Skipped = more
		case CatchUpLast:
			if len(onTime) == 0 {
				p.Dispatch = append(p.Dispatch, p.LastMissed)
			}
			p.Skipped = more || len(onTime) > 0
		default:
			p.Skipped = true
		}
		p.Cursor, p.Advance = p.LastMissed, true
	}
	if len(onTime) > 0 {
		p.Dispatch = append(p.Dispatch, onTime...)
		p.Cursor, p.Advance = onTime[len(onTime)-1], true
	}
	return p
}

// latest returns up to k of the latest ticks in (after, upto], oldest
// first, and whether there are more before them. It enumerates windows
// ending at upto that double from a minute until one holds more than k
// ticks or reaches after.
func latest(spec Spec, after, upto time.Time, k int) ([]time.Time, bool) {
	if k < 1 || !after.Before(upto) {
		return nil, false
	}
	for w := time.Minute; ; w *= 2 {
		lo := upto.Add(-w)
		if !lo.After(after) || w >= 1<<61 {
			lo = after
		}
		var ticks []time.Time // the latest k+1 of the window
		for t := spec.Next(lo); !t.IsZero() && !t.After(upto); t = spec.Next(t) {
			if len(ticks) == k+1 {
				ticks = slices.Delete(ticks, 0, 1)
			}
			ticks = append(ticks, t)
		}
		if len(ticks) > k {
			return ticks[1:], true
		}
		if lo.Equal(after) {
			return ticks, false
		}
	}
}
