package queue

import "github.com/fleet-go/fleet/internal/names"

// Limits on names. A queue's name travels as the payload of the wake-up
// NOTIFY (at most 8000 bytes) and in every claim; a job's name selects its
// handler. Both are stored as text.
const (
	// MaxQueueBytes is the longest queue name, in bytes.
	MaxQueueBytes = names.MaxQueueBytes
	// MaxNameBytes is the longest job name, in bytes.
	MaxNameBytes = names.MaxNameBytes
)

// CheckQueue reports whether q can be a queue's name: not empty or only
// spaces, valid UTF-8, no control characters (newline, tab, NUL, ...), no
// comma (a worker's queues are one comma-separated list), at most
// MaxQueueBytes. The error starts with label, the name of the
// argument that carried q ("--queue", "JobSpec.Queue"). The configuration
// (queue.default_queue, queue.queues, a supervisor's queues) and the SQL
// function fleet_dispatch apply the same rules.
func CheckQueue(label, q string) error { return names.CheckQueue(label, q) }

// CheckName is CheckQueue for a job's name, of at most MaxNameBytes.
func CheckName(label, name string) error { return names.CheckName(label, name) }

func checkName(label, s string, maxBytes int) error { return names.Check(label, s, maxBytes) }
