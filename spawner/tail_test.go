package spawner

import (
	"strings"
	"testing"
)

// The tail keeps the last whole lines within MaxStderrTail; a crash report
// keeps its head, and a later one replaces it; an overlong line is cut.
func TestStderrTail(t *testing.T) {
	t.Parallel()
	var tail stderrTail
	if tail.String() != "" {
		t.Fatalf("empty tail %q", tail.String())
	}
	line := strings.Repeat("a", 99)
	for range 100 {
		tail.add(line)
	}
	if got := tail.String(); len(got) > MaxStderrTail || strings.Count(got, "\n") != MaxStderrTail/100-1 {
		t.Errorf("tail of %d bytes, %d lines", len(got), strings.Count(got, "\n")+1)
	}
	tail.add("panic: boom")
	for range 100 {
		tail.add("\tframe " + line)
	}
	got := tail.String()
	if !strings.HasPrefix(got, "panic: boom\n\tframe ") || len(got) > MaxStderrTail || strings.Contains(got, "aaaa\na") {
		t.Errorf("crash report kept as %q...", got[:min(len(got), 40)])
	}
	tail.add("fatal error: concurrent map writes")
	tail.add("goroutine 1 [running]:")
	if got := tail.String(); got != "fatal error: concurrent map writes\ngoroutine 1 [running]:" {
		t.Errorf("a later report kept as %q", got)
	}
	var long stderrTail
	long.add(strings.Repeat("b", 3*MaxStderrTail))
	long.add("after")
	if got := long.String(); got != "after" {
		t.Errorf("after an overlong line the tail is %d bytes, want the last line alone", len(got))
	}
}
