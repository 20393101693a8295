package store

import (
	"embed"
	"fmt"
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

//go:embed sql/*.sql
var sqlFiles embed.FS

// statement is one text of store/sql compiled to positional parameters.
type statement struct {
	// file is the text's file name in store/sql.
	file string
	// sql is the text as PostgreSQL runs it: $n for the n-th declared
	// parameter, comments and blank lines left out.
	sql string
	// params are the declared parameter names, $1's first.
	params []string
}

// mustStatement compiles the file of store/sql with the parameters params
// ($1 the first). It panics when the file is missing or does not use
// exactly those parameters: the texts are part of the program, and a
// mismatch is a bug that every test of the package then reports.
func mustStatement(file string, params ...string) statement {
	text, err := sqlFiles.ReadFile("sql/" + file)
	if err != nil {
		panic(fmt.Sprintf("store: statement %s: %v", file, err))
	}
	sql, err := compileStatement(string(text), params)
	if err != nil {
		panic(fmt.Sprintf("store: statement %s: %v", file, err))
	}
	return statement{file: file, sql: sql, params: params}
}

// compileStatement returns text with each named parameter (@name: a
// letter or underscore, then letters, digits or underscores) replaced by
// its position in params ($1 for params[0]), and its comments (from "--"
// to the end of the line) and blank lines left out. It refuses a text that
// uses a name not in params, leaves one of params unused, declares a name
// twice, or holds a positional parameter of its own. String literals,
// quoted identifiers and dollar-quoted strings are copied as they are; an
// "@" followed by anything but a letter or underscore (the operators @>,
// <@, @@) is no parameter.
func compileStatement(text string, params []string) (string, error) {
	pos := make(map[string]int, len(params))
	for i, p := range params {
		if !isParamName(p) {
			return "", fmt.Errorf("parameter %q: not a name", p)
		}
		if _, dup := pos[p]; dup {
			return "", fmt.Errorf("parameter @%s declared twice", p)
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
				return "", fmt.Errorf("unterminated %c at offset %d", c, i)
			}
			out.WriteString(text[i:end])
			i = end
		case c == '$' && i+1 < len(text) && text[i+1] >= '0' && text[i+1] <= '9':
			return "", fmt.Errorf("positional parameter at offset %d: name it instead", i)
		case c == '$':
			tag, ok := dollarTag(text[i:])
			if !ok {
				out.WriteByte(c)
				i++
				continue
			}
			end := strings.Index(text[i+len(tag):], tag)
			if end < 0 {
				return "", fmt.Errorf("unterminated %s at offset %d", tag, i)
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
				return "", fmt.Errorf("unknown parameter @%s at offset %d", name, i)
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
			return "", fmt.Errorf("parameter @%s is never used", params[i])
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
