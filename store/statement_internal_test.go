package store

import (
	"regexp"
	"strings"
	"testing"
)

func TestCompileStatement(t *testing.T) {
	for _, tc := range []struct {
		name   string
		text   string
		params []string
		want   string
	}{
		{"positions follow the declaration", "SELECT @b, @a, @b", []string{"a", "b"}, "SELECT $2, $1, $2"},
		{"casts and operators", "SELECT @ids::bigint[] @> ARRAY[1], @@ x, @ids <@ y", []string{"ids"},
			"SELECT $1::bigint[] @> ARRAY[1], @@ x, $1 <@ y"},
		{"names end at a non-name byte", "SELECT @job_ids2,@x)", []string{"job_ids2", "x"}, "SELECT $1,$2)"},
		{"literals are copied", `SELECT '@a -- b', 'it''s @a', "@a""q", @a`, []string{"a"},
			`SELECT '@a -- b', 'it''s @a', "@a""q", $1`},
		{"dollar quotes are copied", "DO $$ SELECT @a $$; SELECT $t$ @a $t$, @a", []string{"a"},
			"DO $$ SELECT @a $$; SELECT $t$ @a $t$, $1"},
		{"comments and blank lines go", "-- @b is no parameter\nSELECT @a -- nor @b here\n\n  \nFROM t", []string{"a"},
			"SELECT $1\nFROM t"},
		{"a comment at the end", "SELECT @a\n-- the end", []string{"a"}, "SELECT $1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := compileStatement(tc.text, tc.params)
			if err != nil || got != tc.want {
				t.Errorf("compileStatement(%q, %q) = %q, %v; want %q", tc.text, tc.params, got, err, tc.want)
			}
		})
	}
}

func TestCompileStatementRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		text   string
		params []string
		want   string
	}{
		{"an unknown name", "SELECT @a, @c", []string{"a"}, "unknown parameter @c"},
		{"an unused name", "SELECT @a", []string{"a", "b"}, "@b is never used"},
		{"a name declared twice", "SELECT @a", []string{"a", "a"}, "declared twice"},
		{"a declaration that is no name", "SELECT @a", []string{"a", "1x"}, "not a name"},
		{"a positional parameter", "SELECT @a, $2", []string{"a"}, "positional parameter"},
		{"an open literal", "SELECT @a, 'x", []string{"a"}, "unterminated '"},
		{"an open dollar quote", "SELECT @a, $q$ x", []string{"a"}, "unterminated $q$"},
		{"a name only in a comment", "SELECT 1 -- @a", []string{"a"}, "@a is never used"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := compileStatement(tc.text, tc.params)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("compileStatement(%q, %q) = %q, %v; want an error with %q", tc.text, tc.params, got, err, tc.want)
			}
		})
	}
}

func TestMustStatementPanicsOnAMissingFile(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for a missing file")
		}
	}()
	mustStatement("no-such.sql")
}

// compiledStatements are the statements compiled from store/sql.
var compiledStatements = []statement{jobClaim, jobClaimUnfenced, readyPick, jobFinish, jobFinishEnds, jobRelease, jobInterrupt,
	jobReadyExists, jobNext, jobNextUnfenced, jobCancelLock, jobCancel,
	jobClaimSuspect, jobClaimSuspectUnfenced, jobSuspectReadyExists}

// Every file of store/sql is compiled, and every compiled text takes $1 to
// $n for its n declared parameters and holds no name left over.
func TestEveryStatementFileIsCompiled(t *testing.T) {
	files, err := sqlFiles.ReadDir("sql")
	if err != nil {
		t.Fatal(err)
	}
	compiled := map[string]bool{}
	for _, st := range compiledStatements {
		compiled[st.file] = true
		params := map[string]bool{}
		for _, p := range regexp.MustCompile(`\$\d+`).FindAllString(st.sql, -1) {
			params[p] = true
		}
		if len(params) != len(st.params) {
			t.Errorf("%s: positions %v for %d parameters", st.file, params, len(st.params))
		}
		if regexp.MustCompile(`@[a-z_]`).MatchString(st.sql) {
			t.Errorf("%s: a name is left in the compiled text:\n%s", st.file, st.sql)
		}
	}
	for _, f := range files {
		if !compiled[f.Name()] {
			t.Errorf("sql/%s is compiled by no statement", f.Name())
		}
	}
}

// spaced is sql with every run of white space made one space, and none
// after an opening or before a closing parenthesis.
func spaced(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	return strings.NewReplacer("( ", "(", " )", ")").Replace(s)
}

// The files of store/sql spell out the parts they share with the
// statements still built in Go (releaseLost, the counts): the priority
// levels of a queue, the handoff of concurrency slots, the history insert,
// the counters and the runtime histogram. These must not drift apart.
func TestStatementFilesMatchTheSharedParts(t *testing.T) {
	hist := strings.Split(historyInsert("history", "QUERY"), "QUERY")
	for _, tc := range []struct {
		part  string
		in    []statement
		parts []string
	}{
		{"priority levels of $1", []statement{jobClaim, jobClaimUnfenced, readyPick}, []string{priorityLevels("$1")}},
		{"priority levels of q.name", []statement{jobReadyExists, jobNext, jobNextUnfenced}, []string{priorityLevels("q.name")}},
		{"slot handoff", []statement{jobFinish, jobFinishEnds, jobRelease, jobCancel},
			[]string{limitHandoffCTEs, limitHandedQueues}},
		{"history insert", []statement{jobFinish, jobFinishEnds, jobRelease, jobCancel}, hist},
		{"counters", []statement{jobFinish, jobFinishEnds},
			[]string{counterUpsert, counterShard, counterIncrements, counterConflict}},
		{"runtime histogram", []statement{jobFinish, jobFinishEnds},
			[]string{runtimeCounted("written", "(@shard_base::integer + "+counterShard+")")}},
		{"cancel channel", []statement{jobCancel}, []string{"pg_notify('" + CancelChannel + "'"}},
	} {
		for _, st := range tc.in {
			for _, p := range tc.parts {
				// The shard base is $17 in the compiled finish texts.
				p = strings.ReplaceAll(p, "@shard_base", "$17")
				if !strings.Contains(spaced(st.sql), spaced(p)) {
					t.Errorf("%s: the %s differs from the one in Go:\n%s", st.file, tc.part, spaced(p))
				}
			}
		}
	}
}
