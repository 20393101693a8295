package store

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// The statements of the hot path (claiming, finishing, releasing and
// cancelling jobs, and the idle worker's look for work) are whole SQL
// texts in store/sql, one file per statement, and each variant of a
// statement is a file of its own: what PostgreSQL runs is what the file
// says, top to bottom. A file names its parameters (@queue, @job_ids); the
// Go code declares them, in the order it passes their values, and the
// text is compiled once, when the package is initialized, to the
// positional parameters ($1, $2...) PostgreSQL and pgx take. The compiled
// text is constant, so pgx prepares and caches it as before, and a pooler
// in transaction mode (which runs unnamed statements, see cmd/db.go) gets
// the same text every time.
//
// A step that several statements share (the history insert, the handoff
// of concurrency slots, ...) is written once, in a fragment of
// store/sql/fragments, and each statement that takes it says so on a line
// of its own:
//
//	-- @include slot_handoff
//
// The line stands for the lines of fragments/slot_handoff.sql, whose own
// includes are expanded in turn. A fragment is a run of whole lines cut
// out of a statement, so it follows the files' layout: each of its CTEs
// opens with "), name AS (" and the next line of the includer closes the
// last one. Its first comment says which CTEs it reads and defines; a
// fragment that uses parameters declares them, by the names every
// statement gives them, on one or more lines
//
//	-- @params @master @worker
//
// and it may use no other, nor leave one of them unused; a statement (or
// fragment) that includes it must take each of them. An unknown fragment,
// an include cycle or a parameter that does not match is an error naming
// the file and line at fault, and makes the package's initialization
// panic, so every test of the package reports it. Statements still built
// in Go take a fragment without parameters as text (mustFragment).

//go:embed sql/*.sql sql/fragments/*.sql
var sqlFiles embed.FS

// fragmentDir is where the fragments are, in sqlFiles.
const fragmentDir = "sql/fragments/"

// statement is one text of store/sql compiled to positional parameters.
type statement struct {
	// file is the text's file name in store/sql.
	file string
	// sql is the text as PostgreSQL runs it: $n for the n-th declared
	// parameter, includes expanded, comments and blank lines left out.
	sql string
	// params are the declared parameter names, $1's first.
	params []string
}

// mustStatement compiles the file of store/sql with the parameters params
// ($1 the first). It panics when the file is missing, does not use exactly
// those parameters, or includes a fragment it cannot (see compileFile):
// the texts are part of the program, and a mismatch is a bug that every
// test of the package then reports.
func mustStatement(file string, params ...string) statement {
	sql, err := compileFile(sqlFiles, "sql/"+file, params)
	if err != nil {
		panic(fmt.Sprintf("store: statement %s: %v", file, err))
	}
	return statement{file: file, sql: sql, params: params}
}

// mustFragment returns the fragment name of store/sql/fragments, its
// includes expanded and its comments and blank lines left out, for a
// statement built in Go. The fragment must take no parameters: the Go
// statement numbers its own. It panics as mustStatement does.
func mustFragment(name string) string {
	sql, err := compileFragment(sqlFiles, name)
	if err != nil {
		panic(fmt.Sprintf("store: fragment %s: %v", name, err))
	}
	return sql
}

// compileFile compiles the statement at path in fsys with the parameters
// params: its includes expanded (expand), then its named parameters made
// positional (compileStatement). An error names the file and line at
// fault (store/sql/finish.sql:12, or the fragment's).
func compileFile(fsys fs.FS, path string, params []string) (string, error) {
	text, err := fs.ReadFile(fsys, path)
	if err != nil {
		return "", err
	}
	x := expander{fsys: fsys}
	src, err := x.expand(path, string(text), params, false)
	if err != nil {
		return "", err
	}
	sql, err := compileStatement(src.text(), params)
	if err != nil {
		return "", src.locate(path, err)
	}
	return sql, nil
}

// compileFragment compiles the fragment name of fsys on its own, for a
// statement built in Go: it must declare no parameters.
func compileFragment(fsys fs.FS, name string) (string, error) {
	x := expander{fsys: fsys}
	f, err := x.fragment(name)
	if err != nil {
		return "", err
	}
	if len(f.params) > 0 {
		return "", fmt.Errorf("%s: takes @%s: only a fragment without parameters can be used from Go",
			position{fragmentDir + name + ".sql", f.paramsLine}, strings.Join(f.params, ", @"))
	}
	return compileStatement(f.src.text(), nil)
}

// position is a line of a file of store/sql.
type position struct {
	file string // as in sqlFiles: sql/finish.sql
	line int    // from 1
}

func (p position) String() string { return fmt.Sprintf("store/%s:%d", p.file, p.line) }

// source is a text with its includes expanded: its lines, and where each
// came from.
type source struct {
	lines []string
	at    []position
}

func (s *source) add(line string, at position) {
	s.lines = append(s.lines, line)
	s.at = append(s.at, at)
}

func (s *source) text() string { return strings.Join(s.lines, "\n") }

// locate returns err, an error of compileStatement on s.text(), with the
// file and line it is at in place of its line in s (or, for an error of
// no line, the file path).
func (s *source) locate(path string, err error) error {
	var te *textError
	if errors.As(err, &te) && te.line > 0 && te.line <= len(s.at) {
		return fmt.Errorf("%s: %s", s.at[te.line-1], te.msg)
	}
	return fmt.Errorf("store/%s: %w", path, err)
}

// fragment is a fragment of store/sql/fragments, its includes expanded.
type fragment struct {
	// params are the parameters its @params lines declare, and paramsLine
	// the first of them (0 for none).
	params     []string
	paramsLine int
	src        source
}

// expander expands the includes of a statement; including, the fragments
// being expanded, outermost first, catches a cycle.
type expander struct {
	fsys      fs.FS
	including []string
}

// expand returns the lines of text (the file path) with every include
// directive replaced by the lines of its fragment. takes are the
// parameters text may use: a statement's declared ones, or a fragment's
// @params; each fragment included must take no other. Only a fragment
// (isFragment) may hold an @params line, which expand leaves as a comment.
func (x *expander) expand(path, text string, takes []string, isFragment bool) (source, error) {
	var src source
	for i, line := range strings.Split(text, "\n") {
		at := position{path, i + 1}
		word, arg, ok := directive(line)
		switch {
		case !ok:
			src.add(line, at)
		case word == "params" && !isFragment:
			return src, fmt.Errorf("%s: @params in a statement: a statement's parameters are declared in Go", at)
		case word == "params":
			src.add(line, at)
		default: // include
			if !isParamName(arg) {
				return src, fmt.Errorf("%s: @include %s: want the name of one fragment of %s", at, arg, fragmentDir)
			}
			f, err := x.fragment(arg)
			if err != nil {
				return src, fmt.Errorf("%s: @include %s: %w", at, arg, err)
			}
			for _, p := range f.params {
				if !slices.Contains(takes, p) {
					return src, fmt.Errorf("%s: @include %s: the fragment takes @%s, which store/%s does not", at, arg, p, path)
				}
			}
			src.lines = append(src.lines, f.src.lines...)
			src.at = append(src.at, f.src.at...)
		}
	}
	return src, nil
}

// fragment reads, expands and checks the fragment name: it must exist, not
// include itself through any chain, and use exactly the parameters of its
// @params lines.
func (x *expander) fragment(name string) (*fragment, error) {
	if i := slices.Index(x.including, name); i >= 0 {
		return nil, fmt.Errorf("an include cycle: %s includes %s", strings.Join(x.including[i:], " includes "), name)
	}
	path := fragmentDir + name + ".sql"
	text, err := fs.ReadFile(x.fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no fragment store/%s", path)
	}
	if err != nil {
		return nil, err
	}
	f := &fragment{}
	for i, line := range strings.Split(string(text), "\n") {
		word, arg, ok := directive(line)
		if !ok || word != "params" {
			continue
		}
		at := position{path, i + 1}
		if f.paramsLine == 0 {
			f.paramsLine = i + 1
		}
		for _, p := range strings.FieldsFunc(arg, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' }) {
			param, isName := strings.CutPrefix(p, "@")
			if !isName || !isParamName(param) {
				return nil, fmt.Errorf("%s: @params: %q is no @name", at, p)
			}
			if slices.Contains(f.params, param) {
				return nil, fmt.Errorf("%s: @params: @%s twice", at, param)
			}
			f.params = append(f.params, param)
		}
	}
	x.including = append(x.including, name)
	defer func() { x.including = x.including[:len(x.including)-1] }()
	f.src, err = x.expand(path, string(text), f.params, true)
	if err != nil {
		return nil, err
	}
	// Compiled on its own, the fragment must use exactly its @params.
	if _, err := compileStatement(f.src.text(), f.params); err != nil {
		var te *textError
		if errors.As(err, &te) && te.line == 0 && f.paramsLine > 0 {
			return nil, fmt.Errorf("%s: %s", position{path, f.paramsLine}, te.msg)
		}
		return nil, f.src.locate(path, err)
	}
	return f, nil
}

// directive returns the directive a line holds, alone on it after "--":
// "include" and the fragment's name for "-- @include name", "params" and
// the rest of the line for "-- @params @a @b". Any other comment is no
// directive.
func directive(line string) (word, arg string, ok bool) {
	s, ok := strings.CutPrefix(strings.TrimSpace(line), "--")
	if !ok {
		return "", "", false
	}
	s = strings.TrimSpace(s)
	for _, w := range []string{"include", "params"} {
		rest, found := strings.CutPrefix(s, "@"+w)
		if found && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			return w, strings.TrimSpace(rest), true
		}
	}
	return "", "", false
}

// textError is an error of compileStatement, at a line of its text (from
// 1; 0 for an error of the whole text).
type textError struct {
	line int
	msg  string
}

func (e *textError) Error() string {
	if e.line == 0 {
		return e.msg
	}
	return fmt.Sprintf("line %d: %s", e.line, e.msg)
}

// compileStatement returns text with each named parameter (@name: a
// letter or underscore, then letters, digits or underscores) replaced by
// its position in params ($1 for params[0]), and its comments (from "--"
// to the end of the line) and blank lines left out. It refuses a text that
// uses a name not in params, leaves one of params unused, declares a name
// twice, or holds a positional parameter of its own. String literals,
// quoted identifiers and dollar-quoted strings are copied as they are; an
// "@" followed by anything but a letter or underscore (the operators @>,
// <@, @@) is no parameter. Its errors are *textError, at the line of text
// at fault where there is one.
func compileStatement(text string, params []string) (string, error) {
	pos := make(map[string]int, len(params))
	for i, p := range params {
		if !isParamName(p) {
			return "", &textError{msg: fmt.Sprintf("parameter %q: not a name", p)}
		}
		if _, dup := pos[p]; dup {
			return "", &textError{msg: fmt.Sprintf("parameter @%s declared twice", p)}
		}
		pos[p] = i + 1
	}
	used := make([]bool, len(params))
	var out strings.Builder
	out.Grow(len(text))
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '-' && strings.HasPrefix(text[i:], "--"):
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				end = len(text) - i
			}
			i += end
		case c == '\'' || c == '"':
			end := closingQuote(text, i+1, c)
			if end < 0 {
				return "", &textError{lineAt(text, i), fmt.Sprintf("unterminated %c", c)}
			}
			out.WriteString(text[i:end])
			i = end
		case c == '$' && i+1 < len(text) && text[i+1] >= '0' && text[i+1] <= '9':
			return "", &textError{lineAt(text, i), fmt.Sprintf("positional parameter %s: name it instead", positional(text[i:]))}
		case c == '$':
			tag, ok := dollarTag(text[i:])
			if !ok {
				out.WriteByte(c)
				i++
				continue
			}
			end := strings.Index(text[i+len(tag):], tag)
			if end < 0 {
				return "", &textError{lineAt(text, i), fmt.Sprintf("unterminated %s", tag)}
			}
			end += i + 2*len(tag)
			out.WriteString(text[i:end])
			i = end
		case c == '@' && i+1 < len(text) && isNameStart(text[i+1]):
			j := i + 2
			for j < len(text) && isNamePart(text[j]) {
				j++
			}
			name := text[i+1 : j]
			n, ok := pos[name]
			if !ok {
				return "", &textError{lineAt(text, i), fmt.Sprintf("unknown parameter @%s", name)}
			}
			used[n-1] = true
			out.WriteString("$" + strconv.Itoa(n))
			i = j
		default:
			out.WriteByte(c)
			i++
		}
	}
	for i, u := range used {
		if !u {
			return "", &textError{msg: fmt.Sprintf("parameter @%s is never used", params[i])}
		}
	}
	// Trailing blanks, and lines that held only a comment, go.
	lines := strings.Split(out.String(), "\n")
	kept := lines[:0]
	for _, l := range lines {
		if l = strings.TrimRight(l, " \t\r"); l != "" {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n"), nil
}

// lineAt is the line (from 1) of text that offset i is on.
func lineAt(text string, i int) int { return 1 + strings.Count(text[:i], "\n") }

// positional returns the positional parameter ($ and digits) s starts with.
func positional(s string) string {
	j := 1
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	return s[:j]
}

// closingQuote returns the offset just past the quote q that closes a
// literal whose text starts at from (a doubled quote inside it stands for
// one quote), or -1.
func closingQuote(text string, from int, q byte) int {
	for i := from; i < len(text); i++ {
		if text[i] != q {
			continue
		}
		if i+1 < len(text) && text[i+1] == q {
			i++
			continue
		}
		return i + 1
	}
	return -1
}

// dollarTag returns the tag ($$ or $name$) that opens a dollar-quoted
// string at the start of s.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		switch {
		case s[j] == '$':
			return s[:j+1], true
		case !isNamePart(s[j]):
			return "", false
		}
	}
	return "", false
}

func isParamName(s string) bool {
	if s == "" || !isNameStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isNamePart(s[i]) {
			return false
		}
	}
	return true
}

func isNameStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isNamePart(c byte) bool { return isNameStart(c) || c >= '0' && c <= '9' }
