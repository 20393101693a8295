package store

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/statements.golden from the compiled statements")

// goldenFile holds the texts PostgreSQL runs for the hot path's statements
// and for the releases of lost jobs and of crashed processes' jobs (which
// take fragments as text), as compiled: a line "-- statement:
// NAME" before each. A change of a file in store/sql or of a fragment that
// changes what runs shows here as a diff; rewrite the file with
//
//	go test ./store -run TestStatementsMatchTheGoldenTexts -update
//
// and read the diff.
const goldenFile = "testdata/statements.golden"

// goldenStatements are the texts the golden file holds, by name.
func goldenStatements() [][2]string {
	var out [][2]string
	for _, st := range compiledStatements {
		out = append(out, [2]string{st.file, st.sql})
	}
	out = append(out,
		[2]string{"releaseLost", releaseLostSQL(false, `j.reserved_by = $1`, 1)},
		[2]string{"releaseLost uncounted", releaseLostSQL(true, `j.reserved_by = $1`, 1)},
		[2]string{"crashRelease", crashRelease})
	return out
}

// normalSpace is sql with every run of white space made one space, and
// none next to a parenthesis or a comma: two texts equal under it differ
// in layout only.
func normalSpace(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	return strings.NewReplacer("( ", "(", " )", ")", " ,", ",", ", ", ",").Replace(s)
}

// The compiled texts are the golden ones, up to white space.
func TestStatementsMatchTheGoldenTexts(t *testing.T) {
	if *updateGolden {
		var b strings.Builder
		for _, st := range goldenStatements() {
			b.WriteString("-- statement: " + st[0] + "\n" + strings.TrimSpace(st[1]) + "\n\n")
		}
		if err := os.WriteFile(goldenFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	golden := map[string]string{}
	var names []string
	for _, part := range strings.Split(string(data), "-- statement: ")[1:] {
		name, sql, _ := strings.Cut(part, "\n")
		golden[name] = sql
		names = append(names, name)
	}
	seen := map[string]bool{}
	for _, st := range goldenStatements() {
		seen[st[0]] = true
		want, ok := golden[st[0]]
		if !ok {
			t.Errorf("%s: not in %s (rewrite it with -update)", st[0], goldenFile)
			continue
		}
		if got, want := normalSpace(st[1]), normalSpace(want); got != want {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			from := max(i-60, 0)
			t.Errorf("%s: the compiled text differs from %s at character %d (rewrite the file with -update if that is meant):\n got: …%s…\nwant: …%s…",
				st[0], goldenFile, i, got[from:min(i+60, len(got))], want[from:min(i+60, len(want))])
		}
	}
	for _, name := range names {
		if !seen[name] {
			t.Errorf("%s: in %s, but no statement of that name is compiled", name, goldenFile)
		}
	}
}
