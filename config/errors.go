package config

import (
	"fmt"
	"unicode/utf8"
)

// sourceError is a problem at one place in one source of configuration. Its
// message is "WHERE: MSG", where WHERE is "config/app.toml:3", ".env:5",
// ".env:5: APP_QUEUE__WORKERS", "environment APP_QUEUE__WORKERS" or a key
// such as "queue.workers".
type sourceError struct {
	where string
	msg   string
	err   error // underlying cause; may be nil
}

// Error is "WHERE: MSG", each cut to a readable length: a value of
// megabytes (a pasted file, a runaway script) must not become an error
// line of megabytes. The key stays named: WHERE is cut only past
// maxWhereBytes, which no real key reaches.
func (e *sourceError) Error() string {
	return clip(e.where, maxWhereBytes) + ": " + clip(e.msg, maxMessageBytes)
}

// The longest WHERE, message and quoted value an error shows in full.
const (
	maxWhereBytes   = 300
	maxMessageBytes = 1000
	maxValueBytes   = 200
)

// clip returns s when it is at most limit bytes, else its first bytes (cut
// at a character boundary) followed by how much was left out.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (cut: %d bytes in all)", s[:cut], len(s))
}

// longValue formats a value too long to quote whole: %q and %s show its
// first maxValueBytes and its length, so the quote still closes and the
// rest of the message stays readable.
type longValue string

func (v longValue) Format(f fmt.State, verb rune) {
	s := string(v)
	cut := maxValueBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	switch verb {
	case 'q':
		fmt.Fprintf(f, "%q…", s[:cut])
	default:
		fmt.Fprintf(f, "%s…", s[:cut])
	}
	fmt.Fprintf(f, " (%d bytes)", len(s))
}

// shown is a value quoted (and cut) for a message already: shortValues
// leaves it alone.
type shown string

// shortValues replaces each string of args longer than maxValueBytes by
// a longValue.
func shortValues(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > maxValueBytes {
			a = longValue(s)
		}
		out[i] = a
	}
	return out
}

// Unwrap returns the underlying cause, if any.
func (e *sourceError) Unwrap() error { return e.err }

// keyProblem is a reason a key path cannot be set from a string.
type keyProblem int

const (
	// unknownKey: the path names no field of Config.
	unknownKey keyProblem = iota + 1
	// tableKey: the path names a whole table, not a value.
	tableKey
)

func (p keyProblem) Error() string {
	switch p {
	case unknownKey:
		return "unknown key"
	case tableKey:
		return "key is a table"
	}
	return "key problem"
}

// valueError says a string could not be converted to the field's type.
type valueError struct {
	expected string // e.g. "an integer", "a list of integers"
	err      error  // the parse error, if any
}

func (e *valueError) Error() string { return "expected " + e.expected }

// Unwrap returns the parse error.
func (e *valueError) Unwrap() error { return e.err }
