// Package spawner starts and talks to fleet:work processes. This file holds
// the @fleet line protocol: one JSON object per line after the prefix
// "@fleet ", reports from a worker to its master and commands from the
// master to the worker.
//
// # Output is data, the protocol is the master's
//
// A worker runs the application's handlers in its own process, and they
// print what they like: user input, whole documents, lines of any length
// without a newline, lines that start with "@fleet ". None of it may be
// taken for a report, or a handler could make its master count a crash as
// a recycle (skipping the restart backoff and the crash-loop error), show
// a memory figure of its choosing, or claim a worker ready that hangs. So
// the protocol does not share a stream with the application:
//
//   - Reports travel on a pipe of their own. ProcessSpawner gives each
//     worker the write end as file descriptor 3 (exec.Cmd.ExtraFiles) and
//     announces it in the environment, ProtocolFDEnv=3. The worker opens it
//     with OpenReportPipe, which marks it close-on-exec so that no program
//     a handler starts inherits it, and removes the variable from its
//     environment before any handler runs. The master parses reports from
//     that pipe only. Everything a worker writes on stdout and stderr is
//     the application's output, forwarded line by line with the worker's
//     identity in front and never parsed, "@fleet " lines included.
//   - An overlong line (over MaxLineLength) is never split into lines: on
//     the report pipe it is dropped whole; on stdout and stderr its first
//     MaxLineLength bytes are forwarded, marked as truncated, and the rest
//     up to its newline is dropped. Both are logged, at most once a minute
//     per worker and kind.
//   - An exit reason counts only when the exit status agrees with it
//     (ExitReason.Agrees, ExitFor): a worker that reported max_jobs and
//     then exited 3 crashed, with the backoff and crash-loop detection
//     that go with a crash.
//
// A per-spawn secret in every line was the alternative. It keeps one
// stream, but every line then carries and every parse checks a token, the
// token must be kept out of the handlers' environment and logs, and an
// overlong line still has to be handled on a stream shared with output. A
// pipe of its own makes forging through output impossible rather than
// hard, and keeps the line format and the parser as they were. (Neither
// guards against a handler that sets out to write to the worker's
// descriptors or memory: handlers are the application's own code, in the
// worker's process. What they print is data.)
//
// A worker run by hand with --reports (no master, no pipe) writes the same
// lines on its stdout, for a tool that watches it. Commands travel on the
// worker's stdin, which only its master writes to.
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

// ProtocolFDEnv is the environment variable by which ProcessSpawner
// announces to a worker the file descriptor of its report pipe ("3").
const ProtocolFDEnv = "FLEET_PROTOCOL_FD"

// Exit statuses of fleet:work that say how a worker's exit is counted
// (package cmd's table of exit statuses has them all).
const (
	// ExitCodeJobTimedOut goes with ExitTimeout: the worker gave up on a
	// job that ignored its timeout.
	ExitCodeJobTimedOut = 8
	// ExitCodeUnsaved goes with the reasons of a worker that stops by
	// itself (see ExitReason.Agrees) when it could not write every finished
	// job's outcome before exiting (the database was away; its exiting
	// report counts them as unsaved).
	ExitCodeUnsaved = 10
)

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
	// ReportPrefetch tells the master which claimed jobs wait in the
	// worker for a slot, not started yet (Prefetched), and which stopped
	// waiting (Dequeued: started, or given back). A worker under a master
	// sends one after each claim that leaves jobs waiting, and one before
	// it starts waiting jobs, so that when it dies the master knows which
	// of the jobs it held never started: they are given back without an
	// attempt (see Exit.Unstarted). The spawner keeps the set and does not
	// pass these reports on as events.
	ReportPrefetch ReportType = "prefetch"
)

// ExitReason says why a worker stopped.
type ExitReason string

// Exit reasons. A worker exits 0 for all of them but ExitTimeout and
// ExitError, and ExitCrash, which the master infers when a worker dies
// without saying why, or with an exit status that disagrees with what it
// said (see Agrees).
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

// Agrees reports whether an exit with status code agrees with reason r,
// so that r counts: the reasons a worker stops for by itself (its
// recycling limits, empty, stopped, fenced) go with 0, or with
// ExitCodeUnsaved when it could not write every outcome; ExitTimeout goes
// with ExitCodeJobTimedOut; ExitError with any failing status (a signal
// included). Nothing agrees with ExitCrash, which no worker reports, or
// with a reason this package does not know.
func (r ExitReason) Agrees(code int) bool {
	switch r {
	case ExitMaxJobs, ExitMaxMemory, ExitMaxTime, ExitEmpty, ExitStopped, ExitFenced:
		return code == 0 || code == ExitCodeUnsaved
	case ExitTimeout:
		return code == ExitCodeJobTimedOut
	case ExitError:
		return code != 0
	}
	return false
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
	// Unwritten counts finished attempts whose outcome waits because
	// writing it fails (heartbeat): the database is away, or has no
	// connection to give. Their jobs are done, not stuck: the master does
	// not kill the worker for their age while it keeps saying so.
	Unwritten int `json:"unwritten,omitempty"`
	// Prefetched lists the jobs the worker claimed that now wait for a
	// slot, not started (prefetch).
	Prefetched []int64 `json:"prefetched,omitempty"`
	// Dequeued lists the jobs that no longer wait (prefetch): it started
	// them, or gave them back. It is sent before they start.
	Dequeued []int64 `json:"dequeued,omitempty"`
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
// that is not a protocol line, malformed JSON (anything but white space
// after the object included), an unknown type, or a version this master
// does not speak.
func ParseReport(line string) (Report, error) {
	var r Report
	if err := parseLine(line, &r, &r.V); err != nil {
		return r, err
	}
	switch r.Type {
	case ReportReady, ReportHeartbeat, ReportExiting, ReportWaiting, ReportPrefetch:
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
	// Unmarshal, unlike a Decoder, refuses what follows the object: a line
	// is one object, not an object and whatever came after it.
	if err := json.Unmarshal([]byte(rest), v); err != nil {
		return fmt.Errorf("malformed protocol line: %w", err)
	}
	if *version != ProtocolVersion {
		return fmt.Errorf("protocol version %d not supported (want %d)", *version, ProtocolVersion)
	}
	return nil
}
