package spawner

import (
	"bytes"
	"sync"
	"unicode/utf8"
)

// MaxLineLength is the longest line a LineWriter delivers whole. A longer
// line is delivered in pieces of at most MaxLineLength bytes, so a process
// that never writes a newline cannot make its reader buffer without end.
const MaxLineLength = 64 << 10

// LineWriter is an io.Writer that splits what is written to it into lines
// and hands each complete line to a callback, without its trailing "\n" or
// "\r\n". A line is delivered as soon as its newline is written, however the
// writes split it; Flush delivers a last line that has no newline.
//
// A line longer than MaxLineLength is delivered in pieces of at most
// MaxLineLength bytes, cut where possible between UTF-8 characters.
//
// It is safe for concurrent use; the callback runs with the writer locked,
// one line at a time and in order, so it must not write to the same
// LineWriter.
type LineWriter struct {
	mu  sync.Mutex
	fn  func(line string)
	buf []byte // the unterminated line so far
	max int
}

// NewLineWriter returns a LineWriter handing every line to fn.
func NewLineWriter(fn func(line string)) *LineWriter {
	return &LineWriter{fn: fn, max: MaxLineLength}
}

// Write splits p into lines. It always consumes all of p and never fails.
func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.buf = append(w.buf, p...)
			w.spill()
			break
		}
		line := p[:i]
		if len(w.buf) > 0 {
			w.buf = append(w.buf, line...)
			line = w.buf
		}
		w.deliver(line)
		w.buf = w.buf[:0]
		p = p[i+1:]
	}
	return n, nil
}

// Flush delivers what was written after the last newline, if anything, as
// a line of its own.
func (w *LineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.deliver(w.buf)
	}
	w.buf = w.buf[:0]
}

// deliver hands one complete line to the callback, in pieces when it is
// too long.
func (w *LineWriter) deliver(line []byte) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	for len(line) > w.max {
		cut := cutPoint(line, w.max)
		w.fn(string(line[:cut]))
		line = line[cut:]
	}
	w.fn(string(line))
}

// spill delivers the head of an unterminated line that has grown past the
// limit, keeping at most w.max bytes (one more when the last is a '\r' that
// may start the line's "\r\n"). What it keeps is never empty, so the rest
// of a line delivered in pieces is never an empty line.
func (w *LineWriter) spill() {
	for len(w.buf) > w.max && !(len(w.buf) == w.max+1 && w.buf[w.max] == '\r') {
		cut := cutPoint(w.buf, w.max)
		w.fn(string(w.buf[:cut]))
		w.buf = append(w.buf[:0], w.buf[cut:]...)
	}
}

// cutPoint is where to cut b (longer than limit) to get a piece of at most
// limit bytes: before the character that straddles the limit, if b is UTF-8.
func cutPoint(b []byte, limit int) int {
	for n := limit; n > 0 && n > limit-utf8.UTFMax; n-- {
		if utf8.RuneStart(b[n]) {
			return n
		}
	}
	return limit
}
