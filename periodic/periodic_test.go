package periodic

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// ticks returns the n ticks of s after from.
func ticks(s Spec, from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = s.Next(t)
		out = append(out, t)
	}
	return out
}

func TestDailyBerlinAcrossDST(t *testing.T) {
	loc := berlin(t)
	at := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, loc) }
	daily := MustParse("0 3 * * *", loc)
	// 2025-03-30: clocks jump from 02:00 CET to 03:00 CEST. The fixed
	// clock stands at noon the day before.
	got := ticks(daily, at(2025, 3, 29, 12, 0), 3)
	want := []time.Time{
		time.Date(2025, 3, 30, 1, 0, 0, 0, time.UTC), // 03:00 CEST
		time.Date(2025, 3, 31, 1, 0, 0, 0, time.UTC),
		time.Date(2025, 4, 1, 1, 0, 0, 0, time.UTC),
	}
	if !equalTimes(got, want) {
		t.Errorf("spring: got %v, want %v", got, want)
	}
	if d := got[0].Sub(daily.Next(at(2025, 3, 28, 12, 0))); d != 23*time.Hour {
		t.Errorf("spring: 03:00 to 03:00 across the change is %s, want 23h", d)
	}
	// 2025-10-26: clocks go back from 03:00 CEST to 02:00 CET; the night
	// has 25 hours and 03:00 happens once.
	got = ticks(daily, at(2025, 10, 25, 12, 0), 3)
	want = []time.Time{
		time.Date(2025, 10, 26, 2, 0, 0, 0, time.UTC), // 03:00 CET
		time.Date(2025, 10, 27, 2, 0, 0, 0, time.UTC),
		time.Date(2025, 10, 28, 2, 0, 0, 0, time.UTC),
	}
	if !equalTimes(got, want) {
		t.Errorf("autumn: got %v, want %v", got, want)
	}
	if got[0].Location() != loc || got[0].Hour() != 3 {
		t.Errorf("autumn: tick %v is not 03:00 Berlin time", got[0])
	}
	// Mid-day, the clock standing just before a tick and just after it.
	if n := daily.Next(time.Date(2025, 3, 30, 0, 59, 59, 0, time.UTC)); !n.Equal(time.Date(2025, 3, 30, 1, 0, 0, 0, time.UTC)) {
		t.Errorf("one second before the spring tick: next %v", n)
	}
	if n := daily.Next(time.Date(2025, 10, 26, 2, 0, 0, 0, time.UTC)); !n.Equal(time.Date(2025, 10, 27, 2, 0, 0, 0, time.UTC)) {
		t.Errorf("at the autumn tick: next %v, want the day after", n)
	}

	// A master's round with the clock fixed one second after the spring
	// tick, the cursor at the day before's tick: that one tick, 23 hours on.
	p := Decide(Round{Schedule: Schedule{Spec: daily, CatchUp: CatchUpNone}, Cursor: time.Date(2025, 3, 29, 2, 0, 0, 0, time.UTC),
		Now: time.Date(2025, 3, 30, 1, 0, 1, 0, time.UTC), Grace: 3 * time.Second})
	if !equalTimes(p.Dispatch, []time.Time{time.Date(2025, 3, 30, 1, 0, 0, 0, time.UTC)}) || !p.Next.Equal(time.Date(2025, 3, 31, 1, 0, 0, 0, time.UTC)) {
		t.Errorf("round at the spring tick: %+v", p)
	}

	// A time inside the changing hour follows the cron library: none on the
	// spring day, two (one per offset) on the autumn day.
	early := MustParse("30 2 * * *", loc)
	got = ticks(early, at(2025, 3, 29, 12, 0), 2)
	want = []time.Time{
		time.Date(2025, 3, 31, 0, 30, 0, 0, time.UTC), // 02:30 CEST, the day after
		time.Date(2025, 4, 1, 0, 30, 0, 0, time.UTC),
	}
	if !equalTimes(got, want) {
		t.Errorf("02:30 in spring: got %v, want %v (none on 30 March)", got, want)
	}
	got = ticks(early, at(2025, 10, 25, 12, 0), 3)
	want = []time.Time{
		time.Date(2025, 10, 26, 0, 30, 0, 0, time.UTC), // 02:30 CEST
		time.Date(2025, 10, 26, 1, 30, 0, 0, time.UTC), // 02:30 CET
		time.Date(2025, 10, 27, 1, 30, 0, 0, time.UTC),
	}
	if !equalTimes(got, want) {
		t.Errorf("02:30 in autumn: got %v, want %v", got, want)
	}
}

func equalTimes(a, b []time.Time) bool {
	return slices.EqualFunc(a, b, func(x, y time.Time) bool { return x.Equal(y) })
}

func TestEveryIsAlignedToTheEpoch(t *testing.T) {
	loc := berlin(t)
	for _, c := range []struct {
		expr string
		from time.Time
		want time.Time
	}{
		{"@every 1s", time.Date(2025, 1, 1, 0, 0, 0, 400, time.UTC), time.Date(2025, 1, 1, 0, 0, 1, 0, time.UTC)},
		{"@every 1s", time.Date(2025, 1, 1, 0, 0, 1, 0, time.UTC), time.Date(2025, 1, 1, 0, 0, 2, 0, time.UTC)},
		{"@every 15m", time.Date(2025, 1, 1, 10, 7, 3, 0, time.UTC), time.Date(2025, 1, 1, 10, 15, 0, 0, time.UTC)},
		{"@every 1h", time.Date(2025, 3, 30, 0, 30, 0, 0, time.UTC), time.Date(2025, 3, 30, 1, 0, 0, 0, time.UTC)},
		{"@every 7s", time.Unix(20, 0), time.Unix(21, 0)},
		{"@every 7s", time.Unix(-1, 0), time.Unix(0, 0)},
	} {
		s := MustParse(c.expr, loc)
		// Two masters that started at different instants agree.
		if got := s.Next(c.from); !got.Equal(c.want) {
			t.Errorf("%s after %v: %v, want %v", c.expr, c.from, got, c.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for expr, want := range map[string]string{
		"":                      "empty",
		"* * * *":               "expected exactly 5 fields",
		"0 0 * * * *":           "expected exactly 5 fields",
		"61 * * * *":            "above maximum",
		"@every 500ms":          "whole number of seconds",
		"@every 1.5s":           "whole number of seconds",
		"@every soon":           "invalid duration",
		"@fortnightly":          "unrecognized descriptor",
		"0 0 30 2 *":            "never ticks",
		"TZ=UTC 0 3 * * *":      "timezone key",
		"CRON_TZ=UTC 0 3 * * *": "timezone key",
	} {
		if _, err := Parse(expr, time.UTC); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", expr, err, want)
		}
	}
	for _, expr := range []string{"0 3 * * *", "*/5 * * * *", "0 9 * * mon-fri", "@hourly", "@daily", "@every 30s", "0 0 29 2 *"} {
		if _, err := Parse(expr, time.UTC); err != nil {
			t.Errorf("Parse(%q): %v", expr, err)
		}
	}
}

func TestPayloadAt(t *testing.T) {
	loc := berlin(t)
	tick := time.Date(2025, 3, 30, 1, 0, 0, 0, time.UTC)
	s := Schedule{Name: "n", Spec: MustParse("0 3 * * *", loc), Payload: json.RawMessage(`{"a":1}`)}
	if b, err := s.PayloadAt(tick); err != nil || string(b) != `{"a":1}` {
		t.Fatalf("without tick_key: %s, %v", b, err)
	}
	s.TickKey = "tick"
	b, err := s.PayloadAt(tick)
	if err != nil || string(b) != `{"a":1,"tick":"2025-03-30T03:00:00+02:00"}` {
		t.Fatalf("with tick_key: %s, %v", b, err)
	}
	s.Payload = json.RawMessage(`[1]`)
	if _, err := s.PayloadAt(tick); err == nil {
		t.Fatal("tick_key with a list payload: no error")
	}
}

func round(s Schedule, cursor, now time.Time) Plan {
	return Decide(Round{Schedule: s, Cursor: cursor, Now: now, Grace: 3 * time.Second})
}

func TestDecideOnTime(t *testing.T) {
	s := Schedule{Spec: MustParse("@every 1s", time.UTC), CatchUp: CatchUpNone}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	// Nothing due yet.
	p := round(s, t0.Add(300*time.Millisecond), t0.Add(900*time.Millisecond))
	if p.Advance || len(p.Dispatch) != 0 || !p.Next.Equal(t0.Add(time.Second)) {
		t.Fatalf("nothing due: %+v", p)
	}
	// A round 2.5 s late: both ticks are on time, whatever the catch-up.
	p = round(s, t0, t0.Add(2500*time.Millisecond))
	if !equalTimes(p.Dispatch, []time.Time{t0.Add(time.Second), t0.Add(2 * time.Second)}) || !p.Cursor.Equal(t0.Add(2*time.Second)) || p.Skipped {
		t.Fatalf("late round: %+v", p)
	}
	// The tick at exactly now is due.
	p = round(s, t0, t0.Add(time.Second))
	if !equalTimes(p.Dispatch, []time.Time{t0.Add(time.Second)}) {
		t.Fatalf("tick at now: %+v", p)
	}
	// A cursor ahead of the clock (the clock went back): nothing.
	if p := round(s, t0.Add(time.Minute), t0); p.Advance || len(p.Dispatch) != 0 {
		t.Fatalf("cursor ahead: %+v", p)
	}
}

func TestDecideCatchUp(t *testing.T) {
	hourly := MustParse("0 * * * *", time.UTC)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	down := t0.Add(10 * time.Minute)             // the last master stopped
	back := t0.Add(5*time.Hour + 20*time.Minute) // one is back: 01:00 .. 05:00 were missed
	hours := func(hs ...int) []time.Time {
		var out []time.Time
		for _, h := range hs {
			out = append(out, t0.Add(time.Duration(h)*time.Hour))
		}
		return out
	}
	for _, c := range []struct {
		mode    CatchUp
		max     int
		want    []time.Time
		skipped bool
	}{
		{CatchUpNone, 0, nil, true},
		{CatchUpLast, 0, hours(5), true},
		{CatchUpAll, 10, hours(1, 2, 3, 4, 5), false},
		{CatchUpAll, 2, hours(4, 5), true},
	} {
		s := Schedule{Spec: hourly, CatchUp: c.mode, CatchUpMax: c.max}
		p := round(s, down, back)
		if !equalTimes(p.Dispatch, c.want) || p.Skipped != c.skipped || !p.Advance || !p.Cursor.Equal(t0.Add(5*time.Hour)) ||
			!p.FirstMissed.Equal(t0.Add(time.Hour)) || !p.LastMissed.Equal(t0.Add(5*time.Hour)) || !p.Next.Equal(t0.Add(6*time.Hour)) {
			t.Errorf("%s max %d: %+v, want dispatch %v skipped %v", c.mode, c.max, p, c.want, c.skipped)
		}
		// The next round, from the new cursor, has nothing left to do.
		if q := round(s, p.Cursor, back.Add(time.Second)); q.Advance || len(q.Dispatch) != 0 {
			t.Errorf("%s: the round after: %+v", c.mode, q)
		}
	}

	// last with a tick on time in the same round: the on-time one stands
	// in for the missed ones.
	every := Schedule{Spec: MustParse("@every 1s", time.UTC), CatchUp: CatchUpLast}
	p := round(every, t0, t0.Add(10*time.Second+500*time.Millisecond))
	if !equalTimes(p.Dispatch, []time.Time{t0.Add(8 * time.Second), t0.Add(9 * time.Second), t0.Add(10 * time.Second)}) || !p.Skipped ||
		!p.LastMissed.Equal(t0.Add(7*time.Second)) {
		t.Errorf("last with ticks on time: %+v", p)
	}

	// A cursor a year back costs what the dispatched ticks cost, and finds
	// the latest ones.
	minutely := Schedule{Spec: MustParse("* * * * *", time.UTC), CatchUp: CatchUpAll, CatchUpMax: 3}
	p = round(minutely, t0, t0.AddDate(1, 0, 0).Add(30*time.Second))
	end := t0.AddDate(1, 0, 0)
	if !equalTimes(p.Dispatch, []time.Time{end.Add(-2 * time.Minute), end.Add(-time.Minute), end}) || !p.Skipped {
		t.Errorf("a year back: %+v", p)
	}
}
