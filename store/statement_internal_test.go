package store

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
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
// $n for its n declared parameters and holds no name left over; every
// fragment is included somewhere.
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
	included := map[string]bool{}
	for _, dir := range []string{"sql/", fragmentDir} {
		entries, err := sqlFiles.ReadDir(strings.TrimSuffix(dir, "/"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			text, err := sqlFiles.ReadFile(dir + e.Name())
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(text), "\n") {
				if word, arg, ok := directive(line); ok && word == "include" {
					included[arg] = true
				}
			}
		}
	}
	for _, f := range files {
		if !f.IsDir() && !compiled[f.Name()] {
			t.Errorf("sql/%s is compiled by no statement", f.Name())
		}
	}
	fragments, err := sqlFiles.ReadDir(strings.TrimSuffix(fragmentDir, "/"))
	if err != nil {
		t.Fatal(err)
	}
	if len(fragments) == 0 {
		t.Error("no fragment found")
	}
	for _, f := range fragments {
		if !included[strings.TrimSuffix(f.Name(), ".sql")] {
			t.Errorf("%s%s is included by no file", fragmentDir, f.Name())
		}
	}
}

// spaced is sql with every run of white space made one space, and none
// after an opening or before a closing parenthesis.
func spaced(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	return strings.NewReplacer("( ", "(", " )", ")").Replace(s)
}

// runtimeBucketSQL is the bucket of runtime (ms) in the runtime histogram
// as RuntimeBoundsMs makes it: how many bounds lie below it, counted as
// len(bounds) minus the bounds at or above it (width_bucket over the
// negated bounds, smallest first).
func runtimeBucketSQL(runtime string) string {
	neg := make([]string, len(RuntimeBoundsMs))
	for i, b := range RuntimeBoundsMs {
		neg[len(neg)-1-i] = strconv.FormatFloat(-b, 'f', -1, 64)
	}
	return fmt.Sprintf("(%d - width_bucket(-(%s)::float8, '{%s}'::float8[]))",
		len(RuntimeBoundsMs), runtime, strings.Join(neg, ","))
}

// The files of store/sql spell out parts they share with the statements
// still built in Go (releaseLost, crashRelease, the counts) and with the Go that reads
// what they write, where no fragment can be shared: the priority levels of
// a queue (whose queue expression differs), the history's columns, the
// counters' columns, the runtime histogram's bounds and the cancel
// channel. These must not drift apart.
func TestStatementFilesMatchTheSharedParts(t *testing.T) {
	for _, tc := range []struct {
		part  string
		in    []statement
		parts []string
	}{
		{"priority levels of $1", []statement{jobClaim, jobClaimUnfenced, readyPick}, []string{priorityLevels("$1")}},
		{"payload bytes", []statement{jobClaim, jobClaimUnfenced}, []string{"sum(" + payloadBytesSQL("p.payload") + ") OVER w AS upto"}},
		{"priority levels of q.name", []statement{jobReadyExists, jobNext, jobNextUnfenced}, []string{priorityLevels("q.name")}},
		{"history's columns", []statement{jobFinish, jobFinishEnds, jobRelease, jobCancel},
			[]string{"history_rows (" + historyColumns + ") AS ("}},
		{"counters", []statement{jobFinish, jobFinishEnds},
			[]string{counterUpsert + " SELECT queue, " + strings.Replace(counterShard, "(0)", "($17::integer)", 1), counterConflict}},
		{"runtime histogram", []statement{jobFinish, jobFinishEnds},
			[]string{runtimeBucketSQL("GREATEST(runtime, 0)") + " AS bucket"}},
		{"cancel channel", []statement{jobCancel}, []string{"pg_notify('" + CancelChannel + "'"}},
	} {
		for _, st := range tc.in {
			for _, p := range tc.parts {
				if !strings.Contains(spaced(st.sql), spaced(p)) {
					t.Errorf("%s: the %s differs from the one in Go:\n%s", st.file, tc.part, spaced(p))
				}
			}
		}
	}
}

// includeFS is a store/sql of statements s*.sql and fragments for the
// include tests.
func includeFS(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for name, text := range files {
		fsys["sql/"+name] = &fstest.MapFile{Data: []byte(text)}
	}
	return fsys
}

func TestIncludeExpandsFragments(t *testing.T) {
	fsys := includeFS(map[string]string{
		"s.sql": "-- a statement\nWITH a AS (\n    SELECT @x\n-- @include outer\n)\nSELECT @y FROM c",
		"fragments/outer.sql": "-- reads a; defines b and those of inner\n-- @params @x\n), b AS (\n    SELECT @x FROM a\n" +
			"  --   @include inner  \n",
		"fragments/inner.sql": "-- reads b; defines c\n), c AS (\n    SELECT 1 FROM b -- '@x'\n",
	})
	got, err := compileFile(fsys, "sql/s.sql", []string{"y", "x"})
	want := "WITH a AS (\n    SELECT $2\n), b AS (\n    SELECT $2 FROM a\n), c AS (\n    SELECT 1 FROM b\n)\nSELECT $1 FROM c"
	if err != nil || got != want {
		t.Errorf("compileFile = %q, %v; want %q", got, err, want)
	}
	frag, err := compileFragment(fsys, "inner")
	if want := "), c AS (\n    SELECT 1 FROM b"; err != nil || frag != want {
		t.Errorf("compileFragment(inner) = %q, %v; want %q", frag, err, want)
	}
}

// An include that cannot be expanded, and a parameter that does not match,
// are errors naming the file and line at fault.
func TestIncludeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		files  map[string]string
		params []string
		want   string
	}{
		{"an unknown fragment", map[string]string{"s.sql": "SELECT 1\n-- @include nope"}, nil,
			"store/sql/s.sql:2: @include nope: no fragment store/sql/fragments/nope.sql"},
		{"an include of no name", map[string]string{"s.sql": "SELECT 1\n-- @include"}, nil,
			"store/sql/s.sql:2: @include : want the name of one fragment"},
		{"an include of two names", map[string]string{"s.sql": "-- @include a b", "fragments/a.sql": ""}, nil,
			"store/sql/s.sql:1: @include a b: want the name of one fragment"},
		{"a fragment including itself", map[string]string{
			"s.sql": "SELECT 1\n-- @include a", "fragments/a.sql": "-- loops\n-- @include a"}, nil,
			"store/sql/fragments/a.sql:2: @include a: an include cycle: a includes a"},
		{"a cycle of two fragments", map[string]string{
			"s.sql": "SELECT 1\n-- @include a", "fragments/a.sql": "-- @include b", "fragments/b.sql": "x\n-- @include a"}, nil,
			"store/sql/fragments/b.sql:2: @include a: an include cycle: a includes b includes a"},
		{"a fragment's parameter the statement does not take", map[string]string{
			"s.sql": "SELECT @a\n-- @include f", "fragments/f.sql": "-- @params @b\n, @b"}, []string{"a"},
			"store/sql/s.sql:2: @include f: the fragment takes @b, which store/sql/s.sql does not"},
		{"a nested fragment's parameter the outer does not take", map[string]string{
			"s.sql": "SELECT @a, @b\n-- @include f", "fragments/f.sql": "-- @params @a\n, @a\n-- @include g",
			"fragments/g.sql": "-- @params @b\n, @b"}, []string{"a", "b"},
			"store/sql/fragments/f.sql:3: @include g: the fragment takes @b, which store/sql/fragments/f.sql does not"},
		{"a parameter used but not declared by the fragment", map[string]string{
			"s.sql": "SELECT @a\n-- @include f", "fragments/f.sql": "-- @params @a\n, @a,\n  @b"}, []string{"a", "b"},
			"store/sql/fragments/f.sql:3: unknown parameter @b"},
		{"a parameter declared but not used by the fragment", map[string]string{
			"s.sql": "SELECT @a\n-- @include f", "fragments/f.sql": "-- what it expects\n-- @params @a, @b\n, @a"}, []string{"a", "b"},
			"store/sql/fragments/f.sql:2: parameter @b is never used"},
		{"a malformed @params", map[string]string{
			"s.sql": "SELECT @a\n-- @include f", "fragments/f.sql": "-- @params a\n, @a"}, []string{"a"},
			`store/sql/fragments/f.sql:1: @params: "a" is no @name`},
		{"@params in a statement", map[string]string{"s.sql": "-- @params @a\nSELECT @a"}, []string{"a"},
			"store/sql/s.sql:1: @params in a statement"},
		{"an unknown parameter after an include", map[string]string{
			"s.sql": "WITH a AS (SELECT 1\n-- @include f\n)\nSELECT @c", "fragments/f.sql": "-- two\n-- lines\n), b AS (\nSELECT 2"}, nil,
			"store/sql/s.sql:4: unknown parameter @c"},
		{"a positional parameter in a fragment", map[string]string{
			"s.sql": "SELECT 1\n-- @include f", "fragments/f.sql": "-- one\n, $1"}, nil,
			"store/sql/fragments/f.sql:2: positional parameter $1"},
		{"a statement parameter no text uses", map[string]string{
			"s.sql": "SELECT 1\n-- @include f", "fragments/f.sql": ", 2"}, []string{"a"},
			"store/sql/s.sql: parameter @a is never used"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := compileFile(includeFS(tc.files), "sql/s.sql", tc.params)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("compileFile = %q, %v; want an error with %q", got, err, tc.want)
			}
		})
	}
}

// A statement built in Go takes only a fragment without parameters.
func TestCompileFragmentRefusesParameters(t *testing.T) {
	fsys := includeFS(map[string]string{"fragments/f.sql": "-- expects\n-- @params @a\n, @a"})
	if got, err := compileFragment(fsys, "f"); err == nil || !strings.Contains(err.Error(), "store/sql/fragments/f.sql:2: takes @a") {
		t.Errorf("compileFragment = %q, %v; want an error naming the @params line", got, err)
	}
	defer func() {
		if recover() == nil {
			t.Error("no panic for a missing fragment")
		}
	}()
	mustFragment("no_such")
}
