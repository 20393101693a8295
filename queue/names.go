package queue

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
// MaxQueueBytes. The error starts with label, the name of the
// argument that carried q ("--queue", "Job.Queue").
func CheckQueue(label, q string) error {
	if err := checkName(label, q, MaxQueueBytes); err != nil {
		return err
	}
	if strings.Contains(q, ",") {
		// Workers take their queues as one comma-separated list.
		return fmt.Errorf("%s %q must not contain a comma: a worker's --queue is a comma-separated list", label, q)
	}
	return nil
}

// CheckName is CheckQueue for a job's name, of at most MaxNameBytes.
func CheckName(label, name string) error { return checkName(label, name, MaxNameBytes) }

func checkName(label, s string, maxBytes int) error {
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
