package spawner

import (
	"bytes"
	"sync"
	"unicode/utf8"
)

// MaxLineLength is the longest line a LineWriter delivers whole. Of a
// longer line only its first MaxLineLength bytes are delivered, marked as
// truncated, and the rest up to its newline is dropped, so a process that
// never writes a newline cannot make its reader buffer without end, and no
// part of an overlong line ever reaches the callback as a line of its own.
const MaxLineLength = 64 << 10

// LineWriter is an io.Writer that splits what is written to it into lines
// and hands each complete line to a callback, without its trailing "\n" or
// "\r\n". A line is delivered as soon as its newline is written, however the
// writes split it; Flush delivers a last line that has no newline.
//
// A line longer than MaxLineLength is delivered once, as soon as it is
// known to be too long, cut to its first MaxLineLength bytes (where
// possible between UTF-8 characters) with truncated set; what follows, up
// to and including its newline, is dropped. A reader that must never act
// on a partial line (the protocol) drops a truncated one; one that shows
// output forwards it marked as cut.
//
// It is safe for concurrent use; the callback runs with the writer locked,
// one line at a time and in order, so it must not write to the same
// LineWriter.
type LineWriter struct {
	mu  sync.Mutex
	fn  func(line string, truncated bool)
	buf []byte // the unterminated line so far, at most max+1 bytes
	max int
	// skipping: the head of an overlong line was delivered; drop what
	// comes up to its newline.
	skipping bool
}

// NewLineWriter returns a LineWriter handing every line to fn.
func NewLineWriter(fn func(line string, truncated bool)) *LineWriter {
	return &LineWriter{fn: fn, max: MaxLineLength}
}

// Write splits p into lines. It always consumes all of p and never fails.
func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if w.skipping {
			if i < 0 {
				break // all of p is the rest of an overlong line
			}
			w.skipping = false
			p = p[i+1:]
			continue
		}
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if len(w.buf) == 0 && i >= 0 {
			// The common case: a whole line within one write.
			w.deliver(part)
			p = p[i+1:]
			continue
		}
		// Up to max+1 bytes are kept: a line of max bytes may still end in
		// "\r\n". More than that is an overlong line for sure.
		if room := w.max + 1 - len(w.buf); len(part) > room {
			w.buf = append(w.buf, part[:room]...)
			w.fn(string(w.buf[:cutPoint(w.buf, w.max)]), true)
			w.buf = w.buf[:0]
			if i < 0 {
				w.skipping = true
				break
			}
			p = p[i+1:]
			continue
		}
		w.buf = append(w.buf, part...)
		if i < 0 {
			break
		}
		w.deliver(w.buf)
		w.buf = w.buf[:0]
		p = p[i+1:]
	}
	return n, nil
}

// Flush delivers what was written after the last newline, if anything, as
// a line of its own. The rest of an overlong line, whose head was already
// delivered, is dropped.
func (w *LineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.deliver(w.buf)
	}
	w.buf = w.buf[:0]
	w.skipping = false
}

// deliver hands one complete line to the callback, cut to its head when it
// is too long.
func (w *LineWriter) deliver(line []byte) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(line) > w.max {
		w.fn(string(line[:cutPoint(line, w.max)]), true)
		return
	}
	w.fn(string(line), false)
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
