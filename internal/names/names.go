// Package names holds the rules for queue and job names, shared by the
// queue package (dispatch), the configuration (queue.default_queue,
// queue.queues) and the supervisors' queues, so that a name is refused in
// the same words wherever it is written.
package names

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on names. A queue's name travels as the payload of the wake-up
// NOTIFY (at most 8000 bytes) and in every claim; a job's name selects its
// handler. Both are stored as text.
const (
	// MaxQueueBytes is the longest queue name, in bytes.
	MaxQueueBytes = 200
	// MaxNameBytes is the longest job name, in bytes.
	MaxNameBytes = 500
)

// CheckQueue reports whether q can be a queue's name: not empty or only
// spaces, valid UTF-8, no control characters (newline, tab, NUL, ...), no
// comma (a worker's queues are one comma-separated list), at most
// MaxQueueBytes. The error starts with label, the name of the key or
// argument that carried q.
func CheckQueue(label, q string) error {
	if err := Check(label, q, MaxQueueBytes); err != nil {
		return err
	}
	if strings.Contains(q, ",") {
		// Workers take their queues as one comma-separated list.
		return fmt.Errorf("%s %q must not contain a comma: a worker's --queue is a comma-separated list", label, q)
	}
	return nil
}

// CheckName is CheckQueue for a job's name, of at most MaxNameBytes (a
// comma is allowed).
func CheckName(label, name string) error { return Check(label, name, MaxNameBytes) }

// Check is the rule every name of fleet follows (queues, jobs, tags,
// limit and unique keys): not empty or only spaces, at most maxBytes,
// valid UTF-8, no control characters.
func Check(label, s string, maxBytes int) error {
	switch {
	case strings.TrimSpace(s) == "":
		return fmt.Errorf("%s must not be empty", label)
	case len(s) > maxBytes:
		return fmt.Errorf("%s must be at most %d bytes, got %d", label, maxBytes, len(s))
	case !utf8.ValidString(s):
		return fmt.Errorf("%s must be valid UTF-8", label)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s %q must not contain control characters (%U at byte %d)", label, s, r, i)
		}
	}
	return nil
}
