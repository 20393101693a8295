package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/joho/godotenv"
)

// dotenvName is the name of the dotenv file in Options.Dir, as errors show it.
const dotenvName = ".env"

// dotenvVar is one variable of the .env file.
type dotenvVar struct {
	name  string
	value string
	line  int // line of its last definition; 0 if unknown
}

// readDotenv reads the .env file at path. A missing file has no variables.
// Values are parsed by godotenv (quotes, escapes, export, ${VAR} expansion
// from earlier lines of the file); the file's structure is first checked by
// scanDotenv, which knows line numbers, so a malformed line is reported as
// ".env:LINE: ...". The variables come back in the order of their lines.
func readDotenv(path string) ([]dotenvVar, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dotenvName, err)
	}
	lines, err := scanDotenv(data)
	if err != nil {
		return nil, err
	}
	values, err := godotenv.UnmarshalBytes(data)
	if err != nil {
		// godotenv's messages quote the rest of the file, which may hold
		// the database password: do not wrap or echo them.
		return nil, fmt.Errorf("%s: cannot be parsed", dotenvName)
	}
	vars := make([]dotenvVar, 0, len(values))
	for name, value := range values {
		vars = append(vars, dotenvVar{name: name, value: value, line: lines[name]})
	}
	slices.SortFunc(vars, func(a, b dotenvVar) int {
		return cmp.Or(cmp.Compare(a.line, b.line), strings.Compare(a.name, b.name))
	})
	return vars, nil
}

// scanDotenv checks the structure of a .env file line by line and returns
// the line of the last definition of each variable. It accepts a subset of
// what godotenv accepts:
//
//	# comment
//	[export] NAME=value [# comment]
//	[export] NAME="value, may span lines" [# comment]
//	[export] NAME='value, may span lines' [# comment]
//
// where NAME is made of ASCII letters, digits, '_' and '.', and ':' may
// stand for '='. Anything else is a malformed line.
func scanDotenv(src []byte) (map[string]int, error) {
	src = bytes.ReplaceAll(src, []byte("\r\n"), []byte("\n"))
	if i := bytes.IndexByte(src, '\r'); i >= 0 {
		// godotenv treats a lone '\r' inconsistently (sometimes a line
		// break, sometimes a space): refuse it.
		line := 1 + bytes.Count(src[:i], []byte("\n"))
		return nil, malformed(line, "carriage return without line feed")
	}
	s := &dotenvScanner{src: src, line: 1}
	lines := make(map[string]int)
	for s.skipBlank() {
		if s.peek() == '#' {
			s.skipLine()
			continue
		}
		line := s.line
		name, err := s.statement()
		if err != nil {
			return nil, err
		}
		lines[name] = line
	}
	return lines, nil
}

// dotenvScanner walks a .env file, tracking the current line.
type dotenvScanner struct {
	src  []byte
	pos  int
	line int
}

// eof is what peek returns at the end of the input.
const eof = -1

func (s *dotenvScanner) peek() int {
	if s.pos >= len(s.src) {
		return eof
	}
	return int(s.src[s.pos])
}

// malformed returns the error for a malformed line.
func malformed(line int, format string, args ...any) error {
	return &sourceError{
		where: fmt.Sprintf("%s:%d", dotenvName, line),
		msg:   "malformed line: " + fmt.Sprintf(format, args...),
	}
}

// skipBlank skips white space including newlines and reports whether
// anything is left.
func (s *dotenvScanner) skipBlank() bool {
	for s.pos < len(s.src) {
		switch s.src[s.pos] {
		case '\n':
			s.line++
		case ' ', '\t', '\r', '\v', '\f':
		default:
			return true
		}
		s.pos++
	}
	return false
}

// skipSpaces skips white space within the line and reports whether it
// skipped any.
func (s *dotenvScanner) skipSpaces() bool {
	start := s.pos
	for s.pos < len(s.src) {
		switch s.src[s.pos] {
		case ' ', '\t', '\r', '\v', '\f':
			s.pos++
		default:
			return s.pos > start
		}
	}
	return s.pos > start
}

// skipLine moves to the newline ending the current line (or the end).
func (s *dotenvScanner) skipLine() {
	if i := bytes.IndexByte(s.src[s.pos:], '\n'); i >= 0 {
		s.pos += i
	} else {
		s.pos = len(s.src)
	}
}

// statement reads one NAME=VALUE definition and returns NAME.
func (s *dotenvScanner) statement() (string, error) {
	line := s.line
	if rest := s.src[s.pos:]; bytes.HasPrefix(rest, []byte("export")) &&
		len(rest) > len("export") && (rest[len("export")] == ' ' || rest[len("export")] == '\t') {
		s.pos += len("export")
		s.skipSpaces()
	}
	start := s.pos
	for s.pos < len(s.src) && isDotenvNameByte(s.src[s.pos]) {
		s.pos++
	}
	name := string(s.src[start:s.pos])
	spaced := s.skipSpaces()
	switch c := s.peek(); {
	case name == "" && (c == '=' || c == ':'):
		return "", malformed(line, "missing variable name before %q", rune(c))
	case c == '=' || c == ':':
		s.pos++
	case c == '\n' || c == eof:
		return "", malformed(line, "expected NAME=VALUE")
	case spaced && isDotenvNameByte(byte(c)):
		return "", malformed(line, "unexpected space in variable name")
	default:
		r, _ := utf8.DecodeRune(s.src[s.pos:])
		return "", malformed(line, "unexpected character %q in variable name", r)
	}
	s.skipSpaces()
	if c := s.peek(); c == '"' || c == '\'' {
		return name, s.quoted(byte(c))
	}
	s.skipLine()
	return name, nil
}

// quoted skips a value quoted with q, which may span lines, and what may
// follow it on its last line: spaces and a comment. Like godotenv, a quote
// preceded by a backslash does not end the value.
func (s *dotenvScanner) quoted(q byte) error {
	line := s.line
	for i := s.pos + 1; i < len(s.src); i++ {
		if s.src[i] != q || s.src[i-1] == '\\' {
			continue
		}
		s.line += bytes.Count(s.src[s.pos:i], []byte("\n"))
		s.pos = i + 1
		s.skipSpaces()
		switch s.peek() {
		case '\n', eof:
		case '#':
			s.skipLine()
		default:
			return malformed(s.line, "unexpected text after closing quote")
		}
		return nil
	}
	return malformed(line, "unterminated quoted value")
}

func isDotenvNameByte(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '.'
}

// dotenvWhere names a variable of the .env file in error messages:
// ".env:5: APP_X", or ".env APP_X" when its line is unknown.
func dotenvWhere(v dotenvVar) string {
	if v.line == 0 {
		return dotenvName + " " + v.name
	}
	return fmt.Sprintf("%s:%d: %s", dotenvName, v.line, v.name)
}

// lookupDotenv returns the value of name in vars.
func lookupDotenv(vars []dotenvVar, name string) (string, bool) {
	for _, v := range vars {
		if v.name == name {
			return v.value, true
		}
	}
	return "", false
}
