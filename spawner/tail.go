package spawner

import (
	"strings"
	"sync"
)

// MaxStderrTail bounds Exit.Stderr: the most bytes of a process's last
// stderr lines its exit carries.
const MaxStderrTail = 4 << 10

// stderrTail keeps what Exit.Stderr reports of a process's stderr: its
// last lines, at most MaxStderrTail bytes of them, or, once a line opens a
// Go runtime crash report ("panic: " or "fatal error: " at the start of a
// line, as a panic that escaped every recover prints before the stack of
// its goroutine), that line and the ones after it, up to MaxStderrTail
// bytes: the message and the top of the stack are what says why the
// process died, and a stack longer than the bound would otherwise lose
// them. A later such line starts a fresh report.
//
// It is safe for concurrent use.
type stderrTail struct {
	mu    sync.Mutex
	lines []string
	size  int  // bytes of lines, a newline each included
	crash bool // lines begin with a crash report: keep its head
}

// add takes one line (without its newline).
func (t *stderrTail) add(line string) {
	if len(line) >= MaxStderrTail {
		line = truncate(line, MaxStderrTail-1)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
		t.lines, t.size, t.crash = t.lines[:0], 0, true
	}
	n := len(line) + 1
	if t.crash {
		if t.size+n > MaxStderrTail {
			return // the report's head is kept; its tail dropped
		}
	} else {
		drop := 0
		for t.size+n > MaxStderrTail && drop < len(t.lines) {
			t.size -= len(t.lines[drop]) + 1
			drop++
		}
		t.lines = append(t.lines[:0], t.lines[drop:]...)
	}
	t.lines = append(t.lines, line)
	t.size += n
}

// String is the lines kept, each ended by a newline but the last.
func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
