package spawner

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// lineRecorder collects the lines a LineWriter delivers.
type lineRecorder struct{ lines []string }

func (r *lineRecorder) add(line string) { r.lines = append(r.lines, line) }

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

func TestLineWriterLongLineIsDeliveredInPieces(t *testing.T) {
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
	if len(r.lines) != 3 {
		t.Fatalf("%d pieces delivered before the newline, want 3", len(r.lines))
	}
	writeAll(t, w, "\nshort\n")
	if len(r.lines) != 5 || r.lines[4] != "short" {
		t.Fatalf("got %d lines, want 4 pieces and %q", len(r.lines), "short")
	}
	for i, piece := range r.lines[:4] {
		if len(piece) > MaxLineLength || len(piece) == 0 {
			t.Fatalf("piece %d has %d bytes", i, len(piece))
		}
	}
	if got := strings.Join(r.lines[:4], ""); got != long {
		t.Fatalf("pieces do not add up to the line")
	}

	// A long line in a single write is cut the same way.
	r.lines = nil
	writeAll(t, w, long+"\r\n")
	if len(r.lines) != 4 || strings.Join(r.lines, "") != long {
		t.Fatalf("single write: %d pieces", len(r.lines))
	}
}

func TestLineWriterCutsBetweenCharacters(t *testing.T) {
	t.Parallel()
	var r lineRecorder
	w := &LineWriter{fn: r.add, max: 8}
	writeAll(t, w, "abcdefgé", "ü€xyz\n") // é straddles the limit
	if want := []string{"abcdefg", "éü€x", "yz"}; !slices.Equal(r.lines, want) {
		t.Fatalf("lines = %q, want %q", r.lines, want)
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
	writeAll(t, w, "abcd", "\r", "\n", "efgh\r", "\n")
	if want := []string{"abcd", "efgh"}; !slices.Equal(r.lines, want) {
		t.Fatalf("lines = %q, want %q", r.lines, want)
	}
}

// TestLineWriterRandomSplits checks that however a text is split into
// writes, the same lines come out.
func TestLineWriterRandomSplits(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "\n", "\r\n", "é", "xyzxyzxyz"}
	for range 200 {
		var text strings.Builder
		for range rng.IntN(60) {
			text.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		s := text.String()
		var want []string
		for _, l := range strings.SplitAfter(s, "\n") {
			if l == "" {
				continue
			}
			want = append(want, strings.TrimSuffix(strings.TrimSuffix(l, "\n"), "\r"))
		}

		var r lineRecorder
		w := NewLineWriter(r.add)
		for rest := s; rest != ""; {
			n := min(1+rng.IntN(7), len(rest))
			writeAll(t, w, rest[:n])
			rest = rest[n:]
		}
		w.Flush()
		if !slices.Equal(r.lines, want) {
			t.Fatalf("text %q: lines = %q, want %q", s, r.lines, want)
		}
	}
}
