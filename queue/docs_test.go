package queue_test

import (
	"os"
	"strings"
	"testing"
)

// TestDocsSamplesAreExamples: every Go sample of docs/jobs-api.md appears,
// line for line, in example_test.go, where it compiles (and mostly runs).
// Indentation, blank lines and whole-line comments do not count.
func TestDocsSamplesAreExamples(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/jobs-api.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	examples := codeLines(string(src))
	samples := 0
	for block := range strings.SplitSeq(string(doc), "```go\n") {
		if samples++; samples == 1 {
			continue // the text before the first sample
		}
		code, _, ok := strings.Cut(block, "```")
		if !ok {
			t.Fatalf("sample %d is not closed", samples-1)
		}
		if lines := codeLines(code); !containsRun(examples, lines) {
			t.Errorf("sample %d of docs/jobs-api.md is not in example_test.go:\n%s", samples-1, strings.Join(lines, "\n"))
		}
	}
	if samples < 2 {
		t.Fatal("docs/jobs-api.md has no Go sample")
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
