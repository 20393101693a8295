// Package doccheck keeps the Go samples of a markdown document true: a
// test of the package whose examples the document shows calls Samples, which
// fails unless every sample is, line for line, in the package's example
// files, where it compiles.
package doccheck

import (
	"os"
	"strings"
	"testing"
)

// Samples fails t unless every ```go block of the markdown file doc appears,
// as consecutive lines, in one of the Go files srcs. Indentation, blank
// lines and whole-line comments do not count. A document with no Go
// sample fails too.
func Samples(t testing.TB, doc string, srcs ...string) {
	t.Helper()
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatalf("read %s: %v", doc, err)
	}
	var files [][]string
	for _, src := range srcs {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("read %s: %v", src, err)
		}
		files = append(files, codeLines(string(b)))
	}
	samples := 0
	for block := range strings.SplitSeq(string(text), "```go\n") {
		if samples++; samples == 1 {
			continue // the text before the first sample
		}
		code, _, ok := strings.Cut(block, "```")
		if !ok {
			t.Fatalf("sample %d of %s is not closed", samples-1, doc)
		}
		lines := codeLines(code)
		found := false
		for _, f := range files {
			if containsRun(f, lines) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("sample %d of %s is not in %v:\n%s", samples-1, doc, srcs, strings.Join(lines, "\n"))
		}
	}
	if samples < 2 {
		t.Fatalf("%s has no Go sample", doc)
	}
}

// codeLines is s's lines, trimmed, without blank lines and whole-line
// comments.
func codeLines(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "//") {
			out = append(out, l)
		}
	}
	return out
}

// containsRun reports whether run appears in lines as consecutive lines.
func containsRun(lines, run []string) bool {
	for i := 0; i+len(run) <= len(lines); i++ {
		match := true
		for j := range run {
			if lines[i+j] != run[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
