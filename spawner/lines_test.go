package spawner

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// lineRecorder collects the lines a LineWriter delivers, and which of
// them were truncated (by index).
type lineRecorder struct {
	lines     []string
	truncated []int
}

func (r *lineRecorder) add(line string, truncated bool) {
	if truncated {
		r.truncated = append(r.truncated, len(r.lines))
	}
	r.lines = append(r.lines, line)
}

func writeAll(t *testing.T, w *LineWriter, chunks ...string) {
	t.Helper()
	for _, c := range chunks {
		if n, err := w.Write([]byte(c)); n != len(c) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", c, n, err)
		}
	}
}

func TestLineWriterJoinsChunksSplitAcrossWrites(t *testing.T) {
	t.Parallel()
	var r lineRecorder
	w := NewLineWriter(r.add)
	writeAll(t, w, "hel", "lo\nwor", "ld\r", "\n", "!")
	if want := []string{"hello", "world"}; !slices.Equal(r.lines, want) {
		t.Fatalf("lines = %q, want %q", r.lines, want)
	}
}

func TestLineWriterSeveralLinesPerWrite(t *testing.T) {
	t.Parallel()
	var r lineRecorder
	w := NewLineWriter(r.add)
	writeAll(t, w, "a\nb\r\n\nc\n\r\nd")
	if want := []string{"a", "b", "", "c", ""}; !slices.Equal(r.lines, want) {
		t.Fatalf("lines = %q, want %q", r.lines, want)
	}
}

func TestLineWriterFlush(t *testing.T) {
	t.Parallel()
	var r lineRecorder
	w := NewLineWriter(r.add)
	w.Flush()
	if len(r.lines) != 0 {
		t.Fatalf("Flush of nothing delivered %q", r.lines)
	}
	writeAll(t, w, "done\n", "last", " words\r")
	if want := []string{"done"}; !slices.Equal(r.lines, want) {
		t.Fatalf("before Flush lines = %q, want %q", r.lines, want)
	}
	w.Flush()
	w.Flush()
	if want := []string{"done", "last words"}; !slices.Equal(r.lines, want) {
		t.Fatalf("after Flush lines = %q, want %q", r.lines, want)
	}
	writeAll(t, w, "again\n")
	if got := r.lines[len(r.lines)-1]; got != "again" {
		t.Fatalf("line after Flush = %q", got)
	}
}

// TestLineWriterLongLineIsTruncatedNotSplit: of a line over the limit only
// its head is delivered, once, marked; the rest up to its newline never
// reaches the callback, however the writes split it, and the next line is
// delivered as usual.
func TestLineWriterLongLineIsTruncatedNotSplit(t *testing.T) {
	t.Parallel()
	var r lineRecorder
	w := NewLineWriter(r.add)
	long := strings.Repeat("0123456789", 20<<10) // 200 KiB
	for i := 0; i < len(long); i += 1000 {
		writeAll(t, w, long[i:min(i+1000, len(long))])
		if len(w.buf) > MaxLineLength+1 {
			t.Fatalf("buffered %d bytes of an unterminated line", len(w.buf))
		}
	}
	// The head goes out as soon as the line is known to be too long.
	if len(r.lines) != 1 || r.lines[0] != long[:MaxLineLength] || !slices.Equal(r.truncated, []int{0}) {
		t.Fatalf("before the newline: %d lines (truncated %v), want the line's first %d bytes, truncated", len(r.lines), r.truncated, MaxLineLength)
	}
	writeAll(t, w, "\nshort\n")
	if len(r.lines) != 2 || r.lines[1] != "short" || len(r.truncated) != 1 {
		t.Fatalf("got %d lines (truncated %v), want the head and %q", len(r.lines), r.truncated, "short")
	}

	// A long line in a single write is cut the same way.
	r = lineRecorder{}
	writeAll(t, w, long+"\r\nnext\n")
	if !slices.Equal(r.lines, []string{long[:MaxLineLength], "next"}) || !slices.Equal(r.truncated, []int{0}) {
		t.Fatalf("single write: %d lines, truncated %v", len(r.lines), r.truncated)
	}

	// The rest of an overlong line is dropped by Flush too.
	r = lineRecorder{}
	writeAll(t, w, long)
	w.Flush()
	writeAll(t, w, "after\n")
	if !slices.Equal(r.lines, []string{long[:MaxLineLength], "after"}) || !slices.Equal(r.truncated, []int{0}) {
		t.Fatalf("flushed: %d lines, truncated %v", len(r.lines), r.truncated)
	}
}

// TestLineWriterNeverDeliversAPaddedTail: a protocol line after exactly
// MaxLineLength bytes of padding, with and without a newline, in one write
// or many, never comes out as a line of its own: the padding is delivered
// truncated, and nothing else.
func TestLineWriterNeverDeliversAPaddedTail(t *testing.T) {
	t.Parallel()
	tail := string(FormatReport(Report{Type: ReportExiting, Reason: ExitMaxJobs}))
	for _, pad := range []int{MaxLineLength - 1, MaxLineLength, MaxLineLength + 1, 2 * MaxLineLength, 5 * MaxLineLength} {
		for _, text := range []string{strings.Repeat("x", pad) + tail, strings.Repeat("x", pad) + strings.TrimSuffix(tail, "\n")} {
			for _, chunk := range []int{1 << 30, 4096, 7, 1} {
				var r lineRecorder
				w := NewLineWriter(r.add)
				for rest := text; rest != ""; {
					n := min(chunk, len(rest))
					writeAll(t, w, rest[:n])
					rest = rest[n:]
				}
				w.Flush()
				for _, l := range r.lines {
					if strings.Contains(l, LinePrefix) {
						t.Fatalf("pad %d, chunks of %d: a line with the prefix was delivered (%d bytes)", pad, chunk, len(l))
					}
				}
				if len(r.lines) != 1 || !slices.Equal(r.truncated, []int{0}) || len(r.lines[0]) != MaxLineLength {
					t.Fatalf("pad %d, chunks of %d: %d lines, truncated %v; want one truncated head", pad, chunk, len(r.lines), r.truncated)
				}
			}
		}
	}
}

func TestLineWriterCutsBetweenCharacters(t *testing.T) {
	t.Parallel()
	var r lineRecorder
	w := &LineWriter{fn: r.add, max: 8}
	writeAll(t, w, "abcdefgé", "ü€xyz\n", "next\n") // é straddles the limit
	if want := []string{"abcdefg", "next"}; !slices.Equal(r.lines, want) || !slices.Equal(r.truncated, []int{0}) {
		t.Fatalf("lines = %q (truncated %v), want %q", r.lines, r.truncated, want)
	}
	for _, l := range r.lines {
		if !utf8.ValidString(l) {
			t.Fatalf("piece %q is not valid UTF-8", l)
		}
	}
}

func TestLineWriterCRLFAtTheLimit(t *testing.T) {
	t.Parallel()
	var r lineRecorder
	w := &LineWriter{fn: r.add, max: 4}
	writeAll(t, w, "abcd", "\r", "\n", "efgh\r", "\n", "ijkl\r\n", "mnop\rq\n", "rstu\r")
	w.Flush()
	if want := []string{"abcd", "efgh", "ijkl", "mnop", "rstu"}; !slices.Equal(r.lines, want) || !slices.Equal(r.truncated, []int{3}) {
		t.Fatalf("lines = %q (truncated %v), want %q with the fourth truncated", r.lines, r.truncated, want)
	}
}

// TestLineWriterRandomSplits checks that however a text is split into
// writes, the same lines come out: each line whole, or, when longer than
// the limit, its head marked as truncated.
func TestLineWriterRandomSplits(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "\n", "\r\n", "\r", "é", "€", "xyzxyzxyz"}
	for i := range 600 {
		limit := []int{4, 10, MaxLineLength}[i%3]
		var text strings.Builder
		for range rng.IntN(60) {
			text.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		s := text.String()
		want := modelLines(s, limit)
		var r lineRecorder
		w := &LineWriter{fn: r.add, max: limit}
		for rest := s; rest != ""; {
			n := min(1+rng.IntN(7), len(rest))
			writeAll(t, w, rest[:n])
			rest = rest[n:]
		}
		w.Flush()
		if !slices.Equal(r.lines, want.lines) || !slices.Equal(r.truncated, want.truncated) {
			t.Fatalf("limit %d, text %q: lines = %q (truncated %v), want %q (truncated %v)", limit, s, r.lines, r.truncated, want.lines, want.truncated)
		}
	}
}

// modelLines is what a LineWriter with the given limit delivers for text
// followed by a Flush: each line whole, or, when longer than limit, its
// head, truncated.
func modelLines(text string, limit int) lineRecorder {
	var want lineRecorder
	for _, l := range strings.SplitAfter(text, "\n") {
		if l == "" {
			continue
		}
		l = strings.TrimSuffix(strings.TrimSuffix(l, "\n"), "\r")
		if len(l) > limit {
			want.add(l[:cutPoint([]byte(l), limit)], true)
		} else {
			want.add(l, false)
		}
	}
	return want
}

// FuzzLineWriter writes arbitrary text in arbitrary pieces to a LineWriter
// with a small limit: what comes out is what modelLines says, so no part of
// an overlong line but its head is ever delivered, whatever the splits.
func FuzzLineWriter(f *testing.F) {
	f.Add("hello\nworld\r\n", uint8(4), []byte{1, 2, 3})
	f.Add("xxxxxxxx@fleet {\"v\":1}\n", uint8(8), []byte{})
	f.Add("xxxxxxxx@fleet {\"v\":1}", uint8(8), []byte{8, 1})
	f.Add("abcd\r\nabcd\r\r\n\r", uint8(4), []byte{4, 1, 1})
	f.Add("é€ü\n\xff\xfe\n", uint8(3), []byte{2})
	f.Fuzz(func(t *testing.T, text string, limit uint8, splits []byte) {
		max := int(limit%16) + 1
		var r lineRecorder
		w := &LineWriter{fn: r.add, max: max}
		rest := text
		for i := 0; rest != ""; i++ {
			n := len(rest)
			if i < len(splits) {
				n = min(int(splits[i])+1, n)
			}
			if k, err := w.Write([]byte(rest[:n])); k != n || err != nil {
				t.Fatalf("Write = %d, %v", k, err)
			}
			if len(w.buf) > max+1 {
				t.Fatalf("buffered %d bytes with a limit of %d", len(w.buf), max)
			}
			rest = rest[n:]
		}
		w.Flush()
		want := modelLines(text, max)
		if !slices.Equal(r.lines, want.lines) || !slices.Equal(r.truncated, want.truncated) {
			t.Fatalf("limit %d, text %q, splits %v: lines %q (truncated %v), want %q (truncated %v)",
				max, text, splits, r.lines, r.truncated, want.lines, want.truncated)
		}
	})
}
