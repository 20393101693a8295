package spawner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrExited is returned (wrapped) by Process.Send when the process has
// already exited.
var ErrExited = errors.New("process has exited")

const (
	// defaultWaitDelay bounds how long a process's output is still read
	// after it exited: a grandchild that inherited its stdout or stderr can
	// hold the pipes open for ever.
	defaultWaitDelay = 3 * time.Second
	// sendTimeout bounds a Send to a live worker that does not read its stdin.
	sendTimeout = 5 * time.Second
	// maxLoggedLine is how much of a malformed protocol line is logged.
	maxLoggedLine = 200
	// reportFD is the worker's descriptor of its report pipe: the first
	// of exec.Cmd.ExtraFiles.
	reportFD = 3
	// logEvery is how often a warning of one kind about one worker is
	// logged at most, after the first.
	logEvery = time.Minute
	// truncatedMark ends a forwarded output line that was cut.
	truncatedMark = " [truncated: line longer than 64 KiB]"
)

// ProcessOptions configures a ProcessSpawner. The zero value starts copies
// of the running executable.
type ProcessOptions struct {
	// Executable is the program to start; default os.Executable(), resolved
	// once by NewProcessSpawner.
	Executable string
	// Args builds the command line (without the program name) for a spec;
	// default WorkArgs.
	Args func(Spec) []string
	// Dir is the working directory of every process; default the master's
	// working directory when NewProcessSpawner is called.
	Dir string
	// Output receives every line a process writes on its stdout and
	// stderr, prefixed with "[SUPERVISOR GROUP PID] "; default os.Stderr.
	// A line longer than MaxLineLength is cut to its first MaxLineLength
	// bytes and marked as truncated. Each line is one Write, and writes of
	// all the spawner's processes are serialized. Write errors are ignored.
	Output io.Writer
	// Logger receives the spawner's own warnings; default slog.Default().
	Logger *slog.Logger
}

// ProcessSpawner starts workers as operating-system processes: by default
// copies of the running executable run as "fleet:work" (see WorkArgs), in
// the master's working directory and with its environment plus the entries
// given to Env.
//
// On Linux a worker is killed by the kernel when its master dies. Each
// worker also gets a stdin pipe that only the master holds: a worker reads
// its commands from it and takes EOF to mean that its master is gone. And
// each gets a report pipe of its own, its descriptor 3 (announced as
// ProtocolFDEnv=3): reports are read from it alone, never from the
// worker's output (see the package documentation).
//
// It is safe for concurrent use.
type ProcessSpawner struct {
	exe       string
	args      func(Spec) []string
	dir       string
	output    io.Writer
	log       *slog.Logger
	waitDelay time.Duration

	outMu sync.Mutex // serializes writes to output

	envMu sync.Mutex
	env   map[string]string
}

// NewProcessSpawner returns a spawner configured by opts. It fails when the
// running executable or the working directory cannot be determined.
func NewProcessSpawner(opts ProcessOptions) (*ProcessSpawner, error) {
	s := &ProcessSpawner{
		exe:       opts.Executable,
		args:      opts.Args,
		dir:       opts.Dir,
		output:    opts.Output,
		log:       opts.Logger,
		waitDelay: defaultWaitDelay,
		env:       map[string]string{},
	}
	if s.exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("spawner: find the running executable: %w", err)
		}
		s.exe = exe
	}
	if s.args == nil {
		s.args = WorkArgs
	}
	if s.dir == "" {
		dir, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("spawner: find the working directory: %w", err)
		}
		s.dir = dir
	}
	if s.output == nil {
		s.output = os.Stderr
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// Env adds an environment variable to every process started from now on.
// The master's own environment (read at each Spawn) is inherited; Env
// entries override it, and a later Env for the same key overrides an
// earlier one. A key that is empty or contains '=' or NUL is ignored with a
// warning. Safe for concurrent use.
func (s *ProcessSpawner) Env(key, value string) {
	if key == "" || strings.ContainsAny(key, "=\x00") {
		s.log.Warn("spawner: ignoring invalid environment variable name", "key", key)
		return
	}
	s.envMu.Lock()
	defer s.envMu.Unlock()
	s.env[key] = value
}

// environ is the environment of a process started now.
func (s *ProcessSpawner) environ() []string {
	env := os.Environ()
	s.envMu.Lock()
	defer s.envMu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(s.env)) {
		// exec.Cmd keeps only the last value of a duplicated key.
		env = append(env, k+"="+s.env[k])
	}
	return env
}

// WorkArgs is the fleet:work command line (without the program name) that
// starts a worker for spec:
//
//	fleet:work --supervisor NAME --queue a,b --master M --worker-name W --concurrency N
//
// followed, each only when non-zero or non-empty, by --master-ttl 10s, --max-jobs N,
// --max-time SECS (rounded up to whole seconds), --max-memory-mb MB,
// --tries N, --backoff 1,5,30, --timeout 30s (a Go duration),
// --payload-budget-bytes N (0 for no bound), --paused, --paused-queues a,b,
// --max-conns N and --isolate.
// The supervisor and queues come first so that ps shows what each process
// works.
func WorkArgs(spec Spec) []string {
	args := []string{
		"fleet:work",
		"--supervisor", spec.Supervisor,
		"--queue", strings.Join(spec.Queues, ","),
		"--master", spec.Master,
		"--worker-name", spec.Worker,
		"--concurrency", strconv.Itoa(spec.Concurrency),
	}
	if spec.MasterTTL != 0 {
		args = append(args, "--master-ttl", spec.MasterTTL.String())
	}
	if spec.MaxJobs != 0 {
		args = append(args, "--max-jobs", strconv.Itoa(spec.MaxJobs))
	}
	if spec.MaxTime != 0 {
		secs := spec.MaxTime / time.Second
		if spec.MaxTime%time.Second > 0 {
			secs++ // a limit below a second must not become "never"
		}
		args = append(args, "--max-time", strconv.FormatInt(int64(secs), 10))
	}
	if spec.MaxMemoryMB != 0 {
		args = append(args, "--max-memory-mb", strconv.Itoa(spec.MaxMemoryMB))
	}
	if spec.Tries != 0 {
		args = append(args, "--tries", strconv.Itoa(spec.Tries))
	}
	if len(spec.Backoff) > 0 {
		secs := make([]string, len(spec.Backoff))
		for i, b := range spec.Backoff {
			secs[i] = strconv.Itoa(b)
		}
		args = append(args, "--backoff", strings.Join(secs, ","))
	}
	if spec.Timeout != 0 {
		args = append(args, "--timeout", spec.Timeout.String())
	}
	if spec.PayloadBudget != 0 {
		args = append(args, "--payload-budget-bytes", strconv.FormatInt(max(spec.PayloadBudget, 0), 10))
	}
	if spec.Paused {
		args = append(args, "--paused")
	}
	if len(spec.PausedQueues) > 0 {
		args = append(args, "--paused-queues", strings.Join(spec.PausedQueues, ","))
	}
	if spec.MaxConns > 0 {
		args = append(args, "--max-conns", strconv.Itoa(spec.MaxConns))
	}
	if spec.Isolate {
		args = append(args, "--isolate")
	}
	return args
}

// Spawn starts a process for spec and returns once it runs.
//
// Each line the process writes on its report pipe is a report and is sent
// to events as it arrives; a malformed or overlong one is dropped, and
// logged (at most once a minute). Every line it writes on stdout or stderr
// is its own output, whatever it holds, and is written to Output prefixed
// with "[SUPERVISOR GROUP PID] ". Once the process has exited and all its
// output and reports have been read (at most a few seconds after the exit
// when a process it started holds them open), exactly one Exit is sent,
// last, with the reason ExitFor decides from its last exiting report and
// its exit status. Events are queued, never dropped, while the receiver is
// busy, and the process's goroutines end once the receiver has taken its
// exit.
//
// ctx only guards the start: Spawn fails without starting anything when
// ctx is already done, but a started process runs until it exits or is
// stopped or killed through the returned Process, whatever happens to ctx,
// so that a master can stop its workers gracefully after its own context
// ends. When the process cannot be started Spawn returns the error and
// sends no event.
func (s *ProcessSpawner) Spawn(ctx context.Context, spec Spec, events chan<- Event) (Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("spawner: start %s: %w", s.exe, err)
	}
	spec.Queues = slices.Clone(spec.Queues)
	spec.Backoff = slices.Clone(spec.Backoff)

	cmd := exec.Command(s.exe, s.args(spec)...)
	cmd.Dir = s.dir
	// Last, so that it wins over an entry of the same name.
	cmd.Env = append(s.environ(), ProtocolFDEnv+"="+strconv.Itoa(reportFD))
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = s.waitDelay
	p := &process{s: s, spec: spec, cmd: cmd, queue: newEventQueue(), reportsDone: make(chan struct{})}
	p.stdout = NewLineWriter(p.outputLine)
	p.stderr = NewLineWriter(func(line string, truncated bool) {
		p.tail.add(line)
		p.outputLine(line, truncated)
	})
	cmd.Stdout = p.stdout
	cmd.Stderr = p.stderr

	// The worker's stdin is a pipe whose write end only the master holds
	// (os.Pipe makes both ends close-on-exec), so the worker sees EOF when
	// the master is gone. Its report pipe is the other way round: the
	// worker holds the only write end, so the master sees EOF once the
	// worker is gone.
	stdin, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("spawner: start %s: create stdin pipe: %w", s.exe, err)
	}
	reports, reportsW, err := os.Pipe()
	if err != nil {
		stdin.Close()
		stdinW.Close()
		return nil, fmt.Errorf("spawner: start %s: create report pipe: %w", s.exe, err)
	}
	cmd.Stdin = stdin
	cmd.ExtraFiles = []*os.File{reportsW}
	err = cmd.Start()
	stdin.Close() // the child has its own copies now
	reportsW.Close()
	if err != nil {
		stdinW.Close()
		reports.Close()
		return nil, fmt.Errorf("spawner: start %s: %w", s.exe, err)
	}
	p.stdin = stdinW
	p.reports = reports

	// The three goroutines belong to the process: the report reader ends
	// at the pipe's EOF (or when wait gives up on it), wait once the exit
	// is queued, the pump once it has delivered it.
	go p.readReports()
	go p.wait()
	go p.queue.pump(events)
	return p, nil
}

// process is a worker started by a ProcessSpawner.
type process struct {
	s    *ProcessSpawner
	spec Spec
	cmd  *exec.Cmd // cmd.Process is set before any goroutine of the process starts

	stdout, stderr *LineWriter
	tail           stderrTail // what its exit reports of its stderr
	queue          *eventQueue

	reports     *os.File      // the read end of the report pipe
	reportsDone chan struct{} // closed once readReports has returned

	sendMu sync.Mutex // serializes writes to stdin
	stdin  *os.File
	exited atomic.Bool

	prefixOnce sync.Once
	prefix     []byte

	mu        sync.Mutex
	reported  ExitReason         // reason of the last exiting report
	waiting   map[int64]struct{} // the jobs it holds not started (ReportPrefetch)
	badReport logLimit           // malformed or overlong report lines
	longLine  logLimit           // truncated output lines
}

// Spec is what the process was started with.
func (p *process) Spec() Spec { return p.spec }

// PID is the process's id.
func (p *process) PID() int { return p.cmd.Process.Pid }

// Send writes cmd to the worker's stdin. It fails, wrapping ErrExited, once
// the process has exited, and gives up after a few seconds on a live worker
// that does not read its stdin.
func (p *process) Send(cmd Command) error {
	if p.exited.Load() {
		return fmt.Errorf("spawner: send %s to worker %d: %w", cmd.Type, p.PID(), ErrExited)
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	_ = p.stdin.SetWriteDeadline(time.Now().Add(sendTimeout))
	_, err := p.stdin.Write(FormatCommand(cmd))
	switch {
	case err == nil:
		return nil
	case p.exited.Load(), errors.Is(err, os.ErrClosed), errors.Is(err, syscall.EPIPE):
		return fmt.Errorf("spawner: send %s to worker %d: %w: %w", cmd.Type, p.PID(), ErrExited, err)
	default:
		return fmt.Errorf("spawner: send %s to worker %d: %w", cmd.Type, p.PID(), err)
	}
}

// Kill sends the process SIGKILL. Killing a process that has already
// exited does nothing.
func (p *process) Kill() error {
	err := p.cmd.Process.Kill()
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("spawner: kill worker %d: %w", p.PID(), err)
	}
	return nil
}

// String names the process as its output prefix does.
func (p *process) String() string {
	return fmt.Sprintf("%s %s %d", p.spec.Supervisor, p.spec.Group(), p.PID())
}

// wait waits for the process to exit and for its output to be read, then
// queues its exit.
func (p *process) wait() {
	err := p.cmd.Wait()
	p.exited.Store(true)
	p.stdin.Close() // unblocks a Send stuck on a full pipe
	p.stdout.Flush()
	p.stderr.Flush()
	// Every report was written before the worker exited; the pipe ends
	// once no process holds it (a worker marks its end close-on-exec, but
	// a program of another kind may have passed it on).
	held := time.NewTimer(p.s.waitDelay)
	select {
	case <-p.reportsDone:
	case <-held.C:
		p.s.log.Warn("spawner: worker exited but its report pipe was still held open, probably by a process it started; stopped reading it",
			"supervisor", p.spec.Supervisor, "group", p.spec.Group(), "pid", p.PID(), "after", p.s.waitDelay)
		p.reports.Close() // ends the reader's read
		<-p.reportsDone
	}
	held.Stop()
	p.reports.Close()

	code := -1
	if st := p.cmd.ProcessState; st != nil {
		code = st.ExitCode()
	}
	var exitErr *exec.ExitError
	var waitErr error
	switch {
	case err == nil, errors.As(err, &exitErr):
	case errors.Is(err, exec.ErrWaitDelay):
		p.s.log.Warn("spawner: worker exited but its output was still held open, probably by a process it started; stopped reading it",
			"supervisor", p.spec.Supervisor, "group", p.spec.Group(), "pid", p.PID(), "after", p.s.waitDelay)
	default:
		waitErr = fmt.Errorf("spawner: wait for worker %d: %w", p.PID(), err)
	}
	p.mu.Lock()
	reported := p.reported
	var unstarted []int64
	if len(p.waiting) > 0 {
		unstarted = slices.Sorted(maps.Keys(p.waiting))
	}
	p.mu.Unlock()
	p.queue.push(Event{Process: p, Exit: &Exit{Reason: ExitFor(reported, code), Reported: reported, Code: code,
		Signal: killedBy(p.cmd.ProcessState), Err: waitErr, Stderr: p.tail.String()}, Unstarted: unstarted})
}

// readReports reads the report pipe until its end, handing each line to
// reportLine.
func (p *process) readReports() {
	defer close(p.reportsDone)
	w := NewLineWriter(p.reportLine)
	_, _ = io.Copy(w, p.reports) // ends at EOF, or with an error once wait closes the pipe
	w.Flush()
}

// reportLine handles one line of the report pipe. Only a whole, well-formed
// report counts: an overlong line is dropped whole, never parsed in part.
func (p *process) reportLine(line string, truncated bool) {
	var r Report
	err := fmt.Errorf("longer than %d bytes: dropped whole", MaxLineLength)
	if !truncated {
		r, err = ParseReport(line)
	}
	if err != nil {
		p.mu.Lock()
		ok, held := p.badReport.allow(time.Now())
		p.mu.Unlock()
		if ok {
			p.s.log.Warn("spawner: ignoring a malformed report line from worker (more are logged at most once a minute)",
				"supervisor", p.spec.Supervisor, "group", p.spec.Group(), "pid", p.PID(),
				"line", truncate(line, maxLoggedLine), "err", err, "ignored_since_last_logged", held)
		}
		return
	}
	if r.Type == ReportPrefetch {
		// Kept here, for the exit: as many as the worker claims, they would
		// crowd the master's events.
		p.mu.Lock()
		p.prefetched(r)
		p.mu.Unlock()
		return
	}
	if r.Type == ReportExiting {
		p.mu.Lock()
		p.reported = r.Reason
		p.mu.Unlock()
	}
	p.queue.push(Event{Process: p, Report: &r})
}

// prefetched applies a prefetch report to the set of jobs the worker holds
// not started; p.mu is held.
func (p *process) prefetched(r Report) {
	if p.waiting == nil {
		p.waiting = make(map[int64]struct{}, len(r.Prefetched))
	}
	for _, id := range r.Prefetched {
		p.waiting[id] = struct{}{}
	}
	for _, id := range r.Dequeued {
		delete(p.waiting, id)
	}
}

// outputLine handles one line of the worker's stdout or stderr: its own
// output, whatever it holds. A line cut at MaxLineLength is forwarded
// marked as truncated, and logged.
func (p *process) outputLine(line string, truncated bool) {
	if truncated {
		p.mu.Lock()
		ok, held := p.longLine.allow(time.Now())
		p.mu.Unlock()
		if ok {
			p.s.log.Warn("spawner: worker wrote an output line longer than 64 KiB: forwarded its first 64 KiB, marked as truncated, and dropped the rest (more are logged at most once a minute)",
				"supervisor", p.spec.Supervisor, "group", p.spec.Group(), "pid", p.PID(), "truncated_since_last_logged", held)
		}
		line += truncatedMark
	}
	p.passThrough(line)
}

// passThrough writes one line of the worker's own output to the spawner's
// Output, prefixed with the worker's identity.
func (p *process) passThrough(line string) {
	p.prefixOnce.Do(func() {
		p.prefix = fmt.Appendf(nil, "[%s %s %d] ", p.spec.Supervisor, p.spec.Group(), p.PID())
	})
	b := make([]byte, 0, len(p.prefix)+len(line)+1)
	b = append(append(append(b, p.prefix...), line...), '\n')
	p.s.outMu.Lock()
	defer p.s.outMu.Unlock()
	_, _ = p.s.output.Write(b)
}

// logLimit lets the first warning of a kind through, then at most one per
// logEvery, counting those it held back.
type logLimit struct {
	at   time.Time // of the last one let through
	held int       // held back since
}

// allow reports whether a warning at now is logged, and how many were
// held back before it.
func (l *logLimit) allow(now time.Time) (ok bool, held int) {
	if !l.at.IsZero() && now.Sub(l.at) < logEvery {
		l.held++
		return false, 0
	}
	held, l.held, l.at = l.held, 0, now
	return true, held
}

// truncate cuts s to at most n bytes, between UTF-8 characters.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:cutPoint([]byte(s), n)]
}

// eventQueue passes a process's events to the receiver in order without
// ever blocking the process's readers, however slow the receiver.
type eventQueue struct {
	mu     sync.Mutex
	items  []Event
	signal chan struct{} // has a value when items may be non-empty
}

func newEventQueue() *eventQueue {
	return &eventQueue{signal: make(chan struct{}, 1)}
}

// push queues e.
func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	q.items = append(q.items, e)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// pump sends queued events to events until it has sent an exit.
func (q *eventQueue) pump(events chan<- Event) {
	for range q.signal {
		q.mu.Lock()
		items := q.items
		q.items = nil
		q.mu.Unlock()
		for _, e := range items {
			events <- e
			if e.Exit != nil {
				return
			}
		}
	}
}
