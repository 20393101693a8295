package config

// sourceError is a problem at one place in one source of configuration. Its
// message is "WHERE: MSG", where WHERE is "config/app.toml:3", ".env:5",
// ".env:5: APP_QUEUE__WORKERS", "environment APP_QUEUE__WORKERS" or a key
// such as "queue.workers".
type sourceError struct {
	where string
	msg   string
	err   error // underlying cause; may be nil
}

func (e *sourceError) Error() string { return e.where + ": " + e.msg }

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
