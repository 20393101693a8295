package ratelog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
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
