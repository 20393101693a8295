// Package spawner starts and talks to fleet:work processes. This file holds
// the @fleet line protocol: reports travel from a worker to its master on the
// worker's stdout, commands from the master to the worker on its stdin, one
// JSON object per line after the prefix "@fleet ". Every other line is the
// application's own output.
package spawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// ProtocolVersion is the version carried in every line ("v").
const ProtocolVersion = 1

// LinePrefix starts every protocol line.
const LinePrefix = "@fleet "

// ReportType is the kind of a worker report.
type ReportType string

// Report types, in the order a worker sends them.
const (
	ReportReady     ReportType = "ready"
	ReportHeartbeat ReportType = "heartbeat"
	ReportExiting   ReportType = "exiting"
	// ReportWaiting, before ready, says the worker is alive but cannot
	// start yet, and why (Waiting): the database does not answer, or has
	// no connection left. It is repeated while the worker waits; its
	// master does not take it for a worker hanging at start.
	ReportWaiting ReportType = "waiting"
)

// ExitReason says why a worker stopped.
type ExitReason string

// Exit reasons. A worker exits 0 for all of them but ExitTimeout and
// ExitError, and ExitCrash, which the master infers when a worker dies
// without saying why.
const (
	ExitMaxJobs   ExitReason = "max_jobs"
	ExitMaxMemory ExitReason = "max_memory"
	ExitMaxTime   ExitReason = "max_time"
	ExitEmpty     ExitReason = "empty"
	ExitStopped   ExitReason = "stopped"
	ExitTimeout   ExitReason = "timeout"
	ExitError     ExitReason = "error"
	ExitCrash     ExitReason = "crash"
	// ExitFenced: the worker's master was out of the fleet's view (its
	// row not live) for a ttl, so the worker stopped claiming and exited.
	ExitFenced ExitReason = "fenced"
)

// Recycled reports whether the worker stopped at one of its recycling limits.
func (r ExitReason) Recycled() bool {
	return r == ExitMaxJobs || r == ExitMaxMemory || r == ExitMaxTime
}

// Report is one line from a worker.
type Report struct {
	V    int        `json:"v"`
	Type ReportType `json:"type"`
	// PID of the worker (ready).
	PID int `json:"pid,omitempty"`
	// Worker is the worker's lease-holder name (ready).
	Worker string `json:"worker,omitempty"`
	// Queues the worker works, in priority order (ready).
	Queues []string `json:"queues,omitempty"`
	// Concurrency is how many jobs it runs at once (ready).
	Concurrency int `json:"concurrency,omitempty"`
	// Jobs is how many attempts it has finished (heartbeat, exiting).
	Jobs int64 `json:"jobs"`
	// Running is how many jobs it runs now (heartbeat, exiting).
	Running int `json:"running"`
	// MemoryMB is its resident memory (heartbeat, exiting).
	MemoryMB float64 `json:"memory_mb"`
	// Paused says it takes no new jobs (heartbeat).
	Paused bool `json:"paused,omitempty"`
	// Reason it stops (exiting).
	Reason ExitReason `json:"reason,omitempty"`
	// Waiting says what the worker waits for (waiting).
	Waiting string `json:"waiting,omitempty"`
	// Unsaved counts finished attempts whose outcome it could not write
	// before exiting (exiting; the database was away): their jobs stay
	// reserved until released, and run again.
	Unsaved int `json:"unsaved,omitempty"`
}

// CommandType is the kind of a master command.
type CommandType string

// Commands a master sends.
const (
	CommandPause    CommandType = "pause"
	CommandContinue CommandType = "continue"
	CommandStop     CommandType = "stop"
	// CommandPauseQueues replaces the set of the worker's queues it must
	// not claim from with Queues (empty: none).
	CommandPauseQueues CommandType = "pause_queues"
)

// Command is one line from a master.
type Command struct {
	V    int         `json:"v"`
	Type CommandType `json:"type"`
	// Queues is the paused set of a pause_queues command.
	Queues []string `json:"queues,omitempty"`
}

// FormatReport renders r as a protocol line ending in a newline. A MemoryMB
// that JSON cannot carry (NaN, ±Inf, as a custom memory probe may return)
// is sent as 0, not as a line without its JSON object.
func FormatReport(r Report) []byte {
	r.V = ProtocolVersion
	if math.IsNaN(r.MemoryMB) || math.IsInf(r.MemoryMB, 0) {
		r.MemoryMB = 0
	}
	return formatLine(r)
}

// FormatCommand renders c as a protocol line ending in a newline.
func FormatCommand(c Command) []byte {
	c.V = ProtocolVersion
	return formatLine(c)
}

func formatLine(v any) []byte {
	b, _ := json.Marshal(v) // plain structs of strings and finite numbers always encode
	var buf bytes.Buffer
	buf.Grow(len(LinePrefix) + len(b) + 1)
	buf.WriteString(LinePrefix)
	buf.Write(b)
	buf.WriteByte('\n')
	return buf.Bytes()
}

// IsProtocolLine reports whether line is meant for the protocol.
func IsProtocolLine(line string) bool { return strings.HasPrefix(line, LinePrefix) }

// ParseReport parses a protocol line from a worker. It fails for a line
// that is not a protocol line, malformed JSON, an unknown type, or a
// version this master does not speak.
func ParseReport(line string) (Report, error) {
	var r Report
	if err := parseLine(line, &r, &r.V); err != nil {
		return r, err
	}
	switch r.Type {
	case ReportReady, ReportHeartbeat, ReportExiting, ReportWaiting:
		return r, nil
	}
	return r, fmt.Errorf("unknown report type %q", r.Type)
}

// ParseCommand parses a protocol line from a master.
func ParseCommand(line string) (Command, error) {
	var c Command
	if err := parseLine(line, &c, &c.V); err != nil {
		return c, err
	}
	switch c.Type {
	case CommandPause, CommandContinue, CommandStop, CommandPauseQueues:
		return c, nil
	}
	return c, fmt.Errorf("unknown command %q", c.Type)
}

func parseLine(line string, v any, version *int) error {
	rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), LinePrefix)
	if !ok {
		return fmt.Errorf("not a protocol line: missing %q prefix", LinePrefix)
	}
	dec := json.NewDecoder(strings.NewReader(rest))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed protocol line: %w", err)
	}
	if *version != ProtocolVersion {
		return fmt.Errorf("protocol version %d not supported (want %d)", *version, ProtocolVersion)
	}
	return nil
}
