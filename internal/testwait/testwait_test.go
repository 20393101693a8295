package testwait

import (
	"fmt"
	"testing"
	"time"
)

// fatalRecorder is a TB that records Fatalf instead of ending the test.
type fatalRecorder struct{ failed string }

func (*fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestEventually(t *testing.T) {
	t.Parallel()
	n := 0
	var ok fatalRecorder
	Eventually(&ok, time.Second, "the third check", func() bool { n++; return n == 3 })
	if ok.failed != "" || n != 3 {
		t.Fatalf("a condition that holds at its third check: failed %q after %d checks", ok.failed, n)
	}
	var never fatalRecorder
	Eventually(&never, 50*time.Millisecond, "never", func() bool { return false })
	if never.failed != "not within 50ms: never" {
		t.Fatalf("a condition that never holds: failed %q", never.failed)
	}
}

func TestClock(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c := NewClock(at)
	if !c.Now().Equal(at) {
		t.Fatalf("now %v, want %v", c.Now(), at)
	}
	c.Advance(90 * time.Second)
	if want := at.Add(90 * time.Second); !c.Now().Equal(want) {
		t.Fatalf("after 90 s: %v, want %v", c.Now(), want)
	}
}
