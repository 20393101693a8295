package ratelog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRateLogOneLinePerStreak(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var r Log
	for range 50 {
		r.Fail(log, "state", "read fleet state failed", "err", errors.New("connection refused"))
	}
	r.OK(log, "state", "reading fleet state works again")
	r.OK(log, "state", "reading fleet state works again") // no streak: silent
	out := buf.String()
	if n := strings.Count(out, "read fleet state failed"); n != 1 {
		t.Errorf("%d failure lines for one streak within a minute, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "works again\" failures=50") {
		t.Errorf("want one recovery line counting 50 failures:\n%s", out)
	}
	if n := strings.Count(out, "works again"); n != 1 {
		t.Errorf("%d recovery lines, want 1", n)
	}
}

// A write that fails and recovers over and over logs its first failure
// and its first recovery, then at most one line a minute with counts.
func TestRateLogFlapping(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := Log{Now: func() time.Time { return now }}
	flap := func(n int, every time.Duration) {
		for range n {
			r.Fail(log, "write", "write outcomes failed", "err", errors.New("connection reset"))
			now = now.Add(every / 2)
			r.OK(log, "write", "writing outcomes works again")
			now = now.Add(every / 2)
		}
	}
	flap(216, 30*time.Second/216)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "write outcomes failed") || !strings.Contains(lines[0], "failures=1") ||
		!strings.Contains(lines[1], "works again") || !strings.Contains(lines[1], "failures=1") {
		t.Fatalf("216 flaps in 30 s logged %d lines, want the first failure and the first recovery:\n%s", len(lines), buf.String())
	}
	// 40 more flaps, a second each: the minute since the last line passes
	// at the 31st recovery (t = 60.5 s), and that line counts what the
	// silent ones stood for: 215 + 31 failures and recoveries.
	buf.Reset()
	flap(40, time.Second)
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, "works again\" failures=246 recoveries=246") {
		t.Fatalf("the next 40 s logged %d lines, want one counting 246 failures and recoveries:\n%s", n, out)
	}
	// Then it works for good: the next line due (t = 120.5 s) says so, with
	// the 9 failures and recoveries since the last line; then silence.
	buf.Reset()
	for range 100 {
		now = now.Add(time.Second)
		r.OK(log, "write", "writing outcomes works again")
	}
	out = buf.String()
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, "works again") || !strings.Contains(out, "failures=9 recoveries=9") {
		t.Fatalf("steady successes logged %d lines, want one recovery line:\n%s", n, out)
	}
}

// A streak after a quiet interval is logged at once again.
func TestRateLogNewStreakAfterInterval(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := Log{Now: func() time.Time { return now }}
	r.Fail(log, "beat", "beat failed")
	r.OK(log, "beat", "beat works again")
	now = now.Add(2 * Interval)
	r.Fail(log, "beat", "beat failed")
	r.OK(log, "beat", "beat works again")
	if n := strings.Count(buf.String(), "\n"); n != 4 {
		t.Fatalf("two streaks minutes apart logged %d lines, want 4:\n%s", n, buf.String())
	}
}
