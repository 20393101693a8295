package spawner

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Spec says which worker to start. The master builds one per process; every
// spawner turns it into a running worker the same way.
type Spec struct {
	// Supervisor is the supervisor the worker belongs to.
	Supervisor string
	// Queues are worked in priority order.
	Queues []string
	// Master is the master's instance id; the worker's leases carry it so
	// another master can release them if this one dies, and the worker
	// claims only while that instance's membership row is live.
	Master string
	// MasterTTL is the master's row ttl: a worker fenced out (its master's
	// row not live) for this long stops and exits with ExitFenced.
	MasterTTL time.Duration
	// Worker is the worker's lease-holder name, unique across the fleet.
	Worker string
	// Concurrency is how many jobs the worker runs at once.
	Concurrency int
	// MaxJobs, MaxTime and MaxMemoryMB are recycling limits (0: never).
	MaxJobs     int
	MaxTime     time.Duration
	MaxMemoryMB int
	// Tries, Backoff and Timeout are the defaults for jobs dispatched
	// without their own (0 / nil: the queue section's defaults).
	Tries   int
	Backoff []int
	Timeout time.Duration
	// PayloadBudget is the worker's byte budget for the payloads it holds,
	// in bytes (see worker.Config.PayloadBudget): 0 the queue section's
	// (queue.payload_budget_bytes), negative no bound.
	PayloadBudget int64
	// Paused starts the worker paused.
	Paused bool
	// PausedQueues are queues the worker must not claim from until told
	// otherwise.
	PausedQueues []string
	// MaxConns is the size of the worker's connection pool, its listener
	// aside (0: database.max_conns, or the default).
	MaxConns int
	// Isolate makes the worker an isolation process: it runs suspect jobs
	// (jobs that were in two or more processes that died), one at a time
	// and nothing else, and exits once none is ready (see
	// worker.Config.Isolate).
	Isolate bool
}

// Group is the key of the process group the spec belongs to: its queues,
// comma-separated ("mail", or "exports,default" for a balance = off group).
func (s Spec) Group() string { return strings.Join(s.Queues, ",") }

// Spawner starts workers. ProcessSpawner starts real processes,
// inprocess.Spawner (package spawner/inprocess) runs workers as
// goroutines, and FakeSpawner (package spawner/spawnertest) lets a test
// drive them; a master cannot tell them apart.
type Spawner interface {
	// Spawn starts a worker for spec. Every report of the process and,
	// last, exactly one exit are sent to events as Event values. Sending may
	// block: the receiver must keep reading until it has seen the exit of
	// every process it spawned.
	Spawn(ctx context.Context, spec Spec, events chan<- Event) (Process, error)
}

// Process is a started worker.
type Process interface {
	// Spec is what the process was started with.
	Spec() Spec
	// PID is its operating-system process id (0 when it has none).
	PID() int
	// Send delivers a command: pause, continue or stop (finish running jobs
	// and exit).
	Send(Command) error
	// Kill ends the process at once. Its jobs stay reserved until released.
	Kill() error
}

// Event is something that happened to a process: a report, or its exit.
type Event struct {
	Process Process
	Report  *Report
	Exit    *Exit
	// Unstarted, with Exit, lists in id order the jobs the worker said it
	// held waiting for a slot and had not started when it exited (its
	// prefetch reports, ReportPrefetch): a crash never ran them. Empty for
	// a spawner whose workers cannot die apart from their master.
	Unstarted []int64
}

// Exit says how a process ended.
type Exit struct {
	// Reason is how the exit counts: the reason the worker reported before
	// exiting when its exit status agrees with it, ExitStopped for a clean
	// exit without a report, and ExitCrash for anything else (see ExitFor).
	Reason ExitReason
	// Reported is the reason of the worker's last exiting report (empty:
	// it sent none). It differs from Reason when the exit status disagreed.
	Reported ExitReason
	// Code is the exit status (-1 when killed by a signal).
	Code int
	// Signal names the signal that killed the process, such as "SIGKILL"
	// (empty when it exited on its own, or outside Unix).
	Signal string
	// Err says what went wrong when the process could not be waited for.
	Err error
	// Stderr is the end of what the process wrote on its stderr: its last
	// lines, at most MaxStderrTail bytes, or the head of the Go runtime's
	// crash report (a panic that escaped every recover, a fatal error)
	// when it printed one (see stderrTail). Empty for a spawner whose
	// workers have no stderr of their own.
	Stderr string
}

// Describe says how the process ended, for a log line: "killed by signal
// SIGKILL" or "exited with status 2", followed by "after reporting
// max_jobs" when the exit status disagreed with the reported reason.
func (e Exit) Describe() string {
	how := fmt.Sprintf("exited with status %d", e.Code)
	if e.Signal != "" {
		how = "killed by signal " + e.Signal
	}
	if e.Reported != "" && e.Reported != e.Reason {
		how += " after reporting " + string(e.Reported)
	}
	return how
}

// ExitFor decides how an exit counts from the last reported reason and the
// exit status: a reported reason counts when the status agrees with it
// (ExitReason.Agrees), and is a crash otherwise; an unreported exit with
// status 0 is a stop; anything else is a crash. So a worker that said it
// stopped at a recycling limit and then exited 3 crashed.
func ExitFor(reported ExitReason, code int) ExitReason {
	switch {
	case reported != "" && reported.Agrees(code):
		return reported
	case reported == "" && code == 0:
		return ExitStopped
	default:
		return ExitCrash
	}
}
