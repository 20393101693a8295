package spawner

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/internal/testwait"
)

// The tests start real worker processes: copies of the test binary that
// TestMain turns into a fake worker when childEnv is set. It writes its
// reports on the report pipe its spawner gave it, as fleet:work does. The
// variable's value is a comma-separated list of modes:
//
//	(none)     a worker: ready, a line on stdout and one on stderr, its working
//	           directory, valueEnv and PATH as lines, a heartbeat every 50 ms; it
//	           obeys pause, continue and stop, and exits 0 on stdin EOF
//	malformed  also writes malformed and overlong lines on its report pipe
//	           before its first heartbeat
//	forge      also writes forged reports of every type on stdout and stderr,
//	           each as a line, without a newline, and after 64 KiB of padding
//	           with and without one, before its first heartbeat
//	crash      exits 3 without reporting, after its output lines
//	maxjobs    reports exiting with reason max_jobs, writes an unterminated
//	           line and exits 0
//	exit=R:N   reports exiting with reason R and exits N
//	chatty     writes many lines and exits 0 without reporting
//	sleep      after its output lines sleeps, ignoring stdin
//	parent     starts a sleeping worker of its own with a ProcessSpawner,
//	           writes "grandchild PID" and sleeps
//	holder     starts a sleeping process that inherits its stdout, writes
//	           "grandchild PID" and exits 0 at once
//	pipeholder starts a sleeping process that inherits its report pipe (as
//	           a program that does not mark it close-on-exec may), writes
//	           "grandchild PID" and exits 0 at once
//	subshell   runs a shell that tries to write a report to descriptor 3,
//	           then reports exiting stopped and exits 0
//
// A sleeping child gives up after childMaxSleep, so that nothing outlives a
// broken test run for long.
const (
	childEnv      = "FLEET_SPAWNER_TEST_CHILD"
	valueEnv      = "FLEET_SPAWNER_TEST_VALUE"
	childMaxSleep = time.Minute
	eventTimeout  = 20 * time.Second
)

func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv(childEnv); ok {
		os.Exit(runChild(strings.Split(mode, ",")))
	}
	goleak.VerifyTestMain(m)
}

// childArgs is the command line of a test child: the test binary running
// no test, then the fleet:work arguments.
func childArgs(spec Spec) []string {
	return append([]string{"-test.run=^$"}, WorkArgs(spec)...)
}

func runChild(modes []string) int {
	has := func(m string) bool { return slices.Contains(modes, m) }
	i := slices.Index(os.Args, "fleet:work")
	if i < 0 {
		fmt.Fprintln(os.Stderr, "child: no fleet:work in", os.Args)
		return 64
	}
	fs := flag.NewFlagSet("fleet:work", flag.ContinueOnError)
	supervisor := fs.String("supervisor", "", "")
	queues := fs.String("queue", "", "")
	fs.String("master", "", "")
	worker := fs.String("worker-name", "", "")
	concurrency := fs.Int("concurrency", 0, "")
	fs.Int("max-jobs", 0, "")
	fs.Int("max-time", 0, "")
	fs.Int("max-memory-mb", 0, "")
	fs.Int("tries", 0, "")
	fs.String("backoff", "", "")
	fs.Duration("timeout", 0, "")
	paused := fs.Bool("paused", false, "")
	if err := fs.Parse(os.Args[i+1:]); err != nil {
		return 64
	}
	spec := Spec{Supervisor: *supervisor, Queues: strings.Split(*queues, ","), Worker: *worker, Concurrency: *concurrency}

	if has("pipeholder") {
		return childPipeHolder() // before the pipe is made close-on-exec
	}
	// Started without a report pipe (by the holder below), a child reports
	// on stdout, as a worker run by hand with --reports does.
	pipe := os.Stdout
	if announced, ok := os.LookupEnv(ProtocolFDEnv); ok {
		var err error
		if pipe, err = OpenReportPipe(announced); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 65
		}
	}
	report := func(r Report) { _, _ = pipe.Write(FormatReport(r)) }
	report(Report{Type: ReportReady, PID: os.Getpid(), Worker: spec.Worker, Queues: spec.Queues, Concurrency: spec.Concurrency})
	fmt.Println("hello from child")
	fmt.Fprintln(os.Stderr, "warning line")
	wd, _ := os.Getwd()
	fmt.Println("cwd", wd)
	fmt.Printf("env %s=%s\n", valueEnv, os.Getenv(valueEnv))
	fmt.Println("path", os.Getenv("PATH"))

	if has("forge") {
		for _, out := range []*os.File{os.Stdout, os.Stderr} {
			for _, text := range forgeries() {
				_, _ = out.WriteString(text)
			}
		}
	}
	for _, m := range modes {
		spec, ok := strings.CutPrefix(m, "exit=")
		if !ok {
			continue
		}
		reason, code, _ := strings.Cut(spec, ":")
		n, _ := strconv.Atoi(code)
		report(Report{Type: ReportExiting, Reason: ExitReason(reason), Jobs: 3})
		return n
	}
	switch {
	case has("malformed"):
		for _, line := range []string{
			"@fleet {nope" + strings.Repeat("x", 300),
			"@fleet {nope",
			`@fleet {"v":1,"type":"dance"}`,
			strings.Repeat("x", MaxLineLength) + strings.TrimSuffix(string(FormatReport(Report{Type: ReportHeartbeat, MemoryMB: 1e6})), "\n"),
			"not a protocol line",
			`@fleet {"v":1,"type":"heartbeat","memory_mb":1e6} trailing`,
		} {
			_, _ = pipe.WriteString(line + "\n")
		}
	case has("subshell"):
		sh := exec.Command("/bin/sh", "-c", "echo '"+strings.TrimSuffix(string(FormatReport(Report{Type: ReportHeartbeat, MemoryMB: 1e6})), "\n")+"' >&3")
		sh.Stdout, sh.Stderr = os.Stdout, os.Stderr
		err := sh.Run()
		fmt.Println("subshell:", err)
		report(Report{Type: ReportExiting, Reason: ExitStopped})
		return 0
	case has("crash"):
		fmt.Fprintln(os.Stderr, "crash line: exiting with status 3")
		return 3
	case has("longcrash"):
		// Far more than an exit keeps: only the last lines are.
		for n := range 200 {
			fmt.Fprintf(os.Stderr, "stderr line %03d %s\n", n, strings.Repeat("y", 60))
		}
		fmt.Println("a last line on stdout, which is no part of the tail")
		return 3
	case has("panic"):
		// A panic no recover sees, in a goroutine of its own: the runtime
		// prints it and its stack on stderr, after a long stderr, and
		// exits 2.
		for n := range 200 {
			fmt.Fprintf(os.Stderr, "stderr line %03d %s\n", n, strings.Repeat("y", 60))
		}
		go childPanic(strings.Repeat("deep ", 3))
		select {}
	case has("maxjobs"):
		report(Report{Type: ReportExiting, Reason: ExitMaxJobs, Jobs: 7})
		fmt.Print("last words")
		return 0
	case has("chatty"):
		for n := range 300 {
			fmt.Printf("line %d of %d %s\n", n, os.Getpid(), strings.Repeat("z", 100))
		}
		return 0
	case has("sleep"):
		time.Sleep(childMaxSleep)
		return 4
	case has("parent"):
		return childParent(spec)
	case has("holder"):
		return childHolder()
	}

	cmds := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
		close(cmds)
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	var jobs int64
	for {
		select {
		case line, ok := <-cmds:
			if !ok {
				return 0 // the master is gone
			}
			c, err := ParseCommand(line)
			if err != nil {
				fmt.Fprintf(os.Stderr, "bad command %q: %v\n", line, err)
				continue
			}
			switch c.Type {
			case CommandPause:
				*paused = true
			case CommandContinue:
				*paused = false
			case CommandStop:
				report(Report{Type: ReportExiting, Reason: ExitStopped, Jobs: jobs})
				return 0
			}
		case <-tick.C:
			jobs++
			report(Report{Type: ReportHeartbeat, Jobs: jobs, MemoryMB: 1.5, Paused: *paused})
		}
	}
}

// childParent starts a sleeping worker with a ProcessSpawner, as a master
// would, then sleeps.
func childParent(spec Spec) int {
	s, err := NewProcessSpawner(ProcessOptions{Args: childArgs})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	s.Env(childEnv, "sleep")
	events := make(chan Event)
	p, err := s.Spawn(context.Background(), spec, events)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	if e := <-events; e.Report == nil || e.Report.Type != ReportReady {
		fmt.Fprintln(os.Stderr, "grandchild did not report ready")
		return 5
	}
	go func() {
		for range events {
		}
	}()
	fmt.Println("grandchild", p.PID())
	time.Sleep(childMaxSleep)
	return 4
}

// forgeries are what the forge mode writes: a ready of another process, a
// heartbeat of a huge worker, a waiting and an exiting report with every
// reason, each
// as a line, without a newline, and after MaxLineLength bytes of padding
// with and without one.
func forgeries() []string {
	reports := []Report{
		{Type: ReportReady, PID: 1, Worker: "forged", Queues: []string{"forged"}, Concurrency: 999},
		{Type: ReportHeartbeat, Jobs: 1e9, Running: 999, MemoryMB: 1e6, Paused: true},
		{Type: ReportWaiting, PID: 1, Waiting: "forged"},
	}
	for _, r := range []ExitReason{ExitMaxJobs, ExitMaxMemory, ExitMaxTime, ExitEmpty, ExitStopped, ExitFenced, ExitTimeout, ExitError, ExitCrash} {
		reports = append(reports, Report{Type: ReportExiting, Reason: r, Jobs: 1e9, MemoryMB: 1e6, Unsaved: 999})
	}
	pad := strings.Repeat("x", MaxLineLength)
	var out []string
	for _, r := range reports {
		line := string(FormatReport(r))
		out = append(out, line, strings.TrimSuffix(line, "\n"), pad+line, pad+strings.TrimSuffix(line, "\n"))
	}
	return out
}

// childPipeHolder starts a sleeping process that inherits its report pipe,
// and exits without waiting for it.
func childPipeHolder() int {
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"=sleep")
	cmd.ExtraFiles = []*os.File{os.NewFile(3, "inherited")}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	fmt.Println("grandchild", cmd.Process.Pid)
	return 0
}

// childHolder starts a sleeping process that holds its stdout open, and
// exits without waiting for it.
func childHolder() int {
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, ProtocolFDEnv+"=") }), childEnv+"=sleep")
	cmd.Stdout = os.Stdout
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	fmt.Println("grandchild", cmd.Process.Pid)
	return 0
}

// syncBuffer is a log or output sink safe for concurrent writes.
type syncBuffer = syncbuf.Buffer

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, timeout, what, cond)
}

type testSpawner struct {
	*ProcessSpawner
	out, logs *syncBuffer
}

// newTestSpawner returns a spawner starting test children in the given
// modes, with its output and logs captured.
func newTestSpawner(t *testing.T, opts ProcessOptions, modes ...string) testSpawner {
	t.Helper()
	ts := testSpawner{out: &syncBuffer{}, logs: &syncBuffer{}}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts.Executable = exe
	opts.Args = childArgs
	opts.Output = ts.out
	opts.Logger = slog.New(slog.NewTextHandler(ts.logs, nil))
	ts.ProcessSpawner, err = NewProcessSpawner(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts.Env(childEnv, strings.Join(modes, ","))
	// A race-enabled child would otherwise sleep a second before exiting.
	ts.Env("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return ts
}

var testSpec = Spec{Supervisor: "sup", Queues: []string{"mail", "default"}, Master: "m1", Worker: "w1", Concurrency: 4}

// child is a started test process and its events.
type child struct {
	t      *testing.T
	p      Process
	events chan Event
	exit   *Exit
	// stderr is the Stderr of the exit waitExit returned, which it clears
	// so that tests compare the rest of an exit as a value.
	stderr string
}

// start spawns a process for spec; cleanup kills it and waits for its exit
// unless the test saw it.
func (ts testSpawner) start(t *testing.T, spec Spec) *child {
	t.Helper()
	c := &child{t: t, events: make(chan Event)}
	p, err := ts.Spawn(t.Context(), spec, c.events)
	if err != nil {
		t.Fatal(err)
	}
	c.p = p
	t.Cleanup(func() {
		if c.exit != nil {
			return
		}
		_ = p.Kill()
		for {
			select {
			case e := <-c.events:
				if e.Exit != nil {
					return
				}
			case <-time.After(eventTimeout):
				t.Errorf("cleanup: no exit from killed process %d", p.PID())
				return
			}
		}
	})
	return c
}

// next returns the process's next event.
func (c *child) next() Event {
	c.t.Helper()
	select {
	case e := <-c.events:
		if e.Process != c.p {
			c.t.Fatalf("event for process %v, want %v", e.Process, c.p)
		}
		if (e.Report == nil) == (e.Exit == nil) {
			c.t.Fatalf("event %+v has not exactly one of Report and Exit", e)
		}
		if e.Exit != nil {
			c.exit = e.Exit
		}
		return e
	case <-time.After(eventTimeout):
		c.t.Fatalf("no event from process %d for %v", c.p.PID(), eventTimeout)
		return Event{}
	}
}

// report returns the next report that satisfies ok, failing on an exit.
func (c *child) report(what string, ok func(Report) bool) Report {
	c.t.Helper()
	for {
		e := c.next()
		if e.Exit != nil {
			c.t.Fatalf("process exited (%+v) before %s", *e.Exit, what)
		}
		if ok(*e.Report) {
			return *e.Report
		}
	}
}

// waitExit returns the process's exit and the reports before it.
func (c *child) waitExit() (Exit, []Report) {
	c.t.Helper()
	var reports []Report
	for {
		e := c.next()
		if e.Exit != nil {
			exit := *e.Exit
			c.stderr, exit.Stderr = exit.Stderr, ""
			return exit, reports
		}
		reports = append(reports, *e.Report)
	}
}

func TestProcessReportsOutputAndStop(t *testing.T) {
	t.Parallel()
	ts := newTestSpawner(t, ProcessOptions{})
	c := ts.start(t, testSpec)
	pid := c.p.PID()
	if pid <= 0 || !reflectEqualSpec(c.p.Spec(), testSpec) {
		t.Fatalf("PID %d, Spec %+v", pid, c.p.Spec())
	}

	ready := c.next()
	if r := ready.Report; r == nil || r.Type != ReportReady || r.PID != pid || r.Worker != "w1" ||
		!slices.Equal(r.Queues, []string{"mail", "default"}) || r.Concurrency != 4 || r.V != ProtocolVersion {
		t.Fatalf("first event = %+v, want the ready report", ready)
	}
	c.report("two heartbeats", func(r Report) bool { return r.Type == ReportHeartbeat && r.Jobs >= 2 && r.MemoryMB == 1.5 })
	if err := c.p.Send(Command{Type: CommandPause}); err != nil {
		t.Fatal(err)
	}
	c.report("a paused heartbeat", func(r Report) bool { return r.Type == ReportHeartbeat && r.Paused })
	if err := c.p.Send(Command{Type: CommandStop}); err != nil {
		t.Fatal(err)
	}
	exit, reports := c.waitExit()
	if exit != (Exit{Reason: ExitStopped, Reported: ExitStopped, Code: 0}) {
		t.Fatalf("exit = %+v, want stopped with code 0", exit)
	}
	if last := reports[len(reports)-1]; last.Type != ReportExiting || last.Reason != ExitStopped {
		t.Fatalf("last report = %+v, want exiting/stopped", last)
	}

	out := ts.out.String()
	prefix := fmt.Sprintf("[sup mail,default %d] ", pid)
	for _, want := range []string{prefix + "hello from child\n", prefix + "warning line\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for line := range strings.Lines(out) {
		if !strings.HasPrefix(line, prefix) || strings.Contains(line, "@fleet") {
			t.Errorf("unexpected output line %q", line)
		}
	}

	if err := c.p.Send(Command{Type: CommandContinue}); !errors.Is(err, ErrExited) {
		t.Errorf("Send after exit = %v, want ErrExited", err)
	}
	if err := c.p.Kill(); err != nil {
		t.Errorf("Kill after exit = %v", err)
	}
	if ts.logs.String() != "" {
		t.Errorf("unexpected logs:\n%s", ts.logs)
	}
}

func reflectEqualSpec(a, b Spec) bool {
	return fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b)
}

func TestProcessCrash(t *testing.T) {
	t.Parallel()
	ts := newTestSpawner(t, ProcessOptions{}, "crash")
	c := ts.start(t, testSpec)
	if exit, _ := c.waitExit(); exit != (Exit{Reason: ExitCrash, Code: 3}) {
		t.Fatalf("exit = %+v, want crash with code 3", exit)
	}
}

// childPanic panics after a few frames of its own.
func childPanic(s string) {
	if s != "" {
		childPanic(s[1:])
		return
	}
	panic("child: a panic that escaped its handler")
}

// The exit of a process that dies carries the end of its stderr: its last
// lines, at most MaxStderrTail bytes and never its stdout; for a Go panic
// that escaped every recover, the panic's message and its goroutine's
// stack, however much came before.
func TestProcessExitCarriesTheEndOfItsStderr(t *testing.T) {
	t.Parallel()
	c := newTestSpawner(t, ProcessOptions{}, "crash").start(t, testSpec)
	if exit, _ := c.waitExit(); exit.Code != 3 || c.stderr != "warning line\ncrash line: exiting with status 3" {
		t.Errorf("exit %+v with stderr %q, want status 3 and both of its stderr lines", exit, c.stderr)
	}

	c = newTestSpawner(t, ProcessOptions{}, "longcrash").start(t, testSpec)
	exit, _ := c.waitExit()
	lines := strings.Split(c.stderr, "\n")
	if exit.Code != 3 || len(c.stderr) > MaxStderrTail || len(c.stderr) < MaxStderrTail-100 ||
		!strings.HasPrefix(lines[len(lines)-1], "stderr line 199 ") || strings.Contains(c.stderr, "stdout") {
		t.Errorf("exit %+v with %d bytes of stderr ending %q, want status 3 and the last 4 KiB of stderr lines",
			exit, len(c.stderr), lines[len(lines)-1])
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, "stderr line ") || len(l) != len(lines[0]) {
			t.Errorf("line %d of the tail is %q: not a whole line", i, l)
		}
	}

	c = newTestSpawner(t, ProcessOptions{}, "panic").start(t, testSpec)
	exit, _ = c.waitExit()
	if exit.Code != 2 || len(c.stderr) > MaxStderrTail ||
		!strings.HasPrefix(c.stderr, "panic: child: a panic that escaped its handler\n") ||
		!strings.Contains(c.stderr, "goroutine ") || !strings.Contains(c.stderr, ".childPanic(") {
		t.Errorf("exit %+v with stderr:\n%s\nwant status 2 and the panic with its stack", exit, c.stderr)
	}
}

func TestProcessReportedExitReasonAndLastLine(t *testing.T) {
	t.Parallel()
	ts := newTestSpawner(t, ProcessOptions{}, "maxjobs")
	c := ts.start(t, testSpec)
	exit, reports := c.waitExit()
	if exit != (Exit{Reason: ExitMaxJobs, Reported: ExitMaxJobs, Code: 0}) {
		t.Fatalf("exit = %+v, want max_jobs with code 0", exit)
	}
	if last := reports[len(reports)-1]; last.Type != ReportExiting || last.Reason != ExitMaxJobs || last.Jobs != 7 {
		t.Fatalf("last report = %+v", last)
	}
	// The unterminated last line is delivered before the exit.
	if want := fmt.Sprintf("[sup mail,default %d] last words\n", c.p.PID()); !strings.Contains(ts.out.String(), want) {
		t.Fatalf("output lacks %q:\n%s", want, ts.out)
	}
}

// TestProcessMalformedLineIsLoggedOnceAndIgnored: malformed lines on the
// report pipe (bad JSON, an unknown type, an overlong report, a line
// without the prefix, a report with something after it) are dropped, the
// first of them logged, and none becomes a report.
func TestProcessMalformedLineIsLoggedOnceAndIgnored(t *testing.T) {
	t.Parallel()
	ts := newTestSpawner(t, ProcessOptions{}, "malformed")
	c := ts.start(t, testSpec)
	// The malformed lines come before the first heartbeat on the pipe.
	c.report("a heartbeat", func(r Report) bool { return r.Type == ReportHeartbeat })
	if err := c.p.Send(Command{Type: CommandStop}); err != nil {
		t.Fatal(err)
	}
	exit, reports := c.waitExit()
	if exit.Reason != ExitStopped || exit.Code != 0 {
		t.Fatalf("exit = %+v", exit)
	}
	for _, r := range reports {
		if r.MemoryMB != 1.5 && r.MemoryMB != 0 {
			t.Errorf("a malformed line became the report %+v", r)
		}
	}

	logs := ts.logs.String()
	if n := strings.Count(logs, "level=WARN"); n != 1 || !strings.Contains(logs, "malformed protocol line") {
		t.Fatalf("want one warning about a malformed line, got:\n%s", logs)
	}
	logged := regexp.MustCompile(`line="(@fleet \{nopex*)"`).FindStringSubmatch(logs)
	if logged == nil || len(logged[1]) != maxLoggedLine {
		t.Fatalf("want the first malformed line truncated to %d bytes, got:\n%s", maxLoggedLine, logs)
	}
	if strings.Contains(logs, "dance") {
		t.Errorf("later malformed lines were logged:\n%s", logs)
	}
	if out := ts.out.String(); strings.Contains(out, "@fleet") || !strings.Contains(out, "hello from child") {
		t.Errorf("output:\n%s", out)
	}
}

// TestProcessForgedReportsAreOutput: a worker that writes forged reports of
// every type on stdout and stderr (a ready of another process, a heartbeat
// of 1e6 MB, an exiting report with every reason and unsaved outcomes),
// each as a line, without a newline, and after 64 KiB of padding with and
// without one, sends only its real reports; the forged lines are its
// output, the overlong ones cut and marked, logged once; and its exit
// counts as what it really did.
func TestProcessForgedReportsAreOutput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		modes []string
		want  Exit
	}{
		{[]string{"forge"}, Exit{Reason: ExitStopped, Reported: ExitStopped}},
		{[]string{"forge", "crash"}, Exit{Reason: ExitCrash, Code: 3}},
		{[]string{"forge", "chatty"}, Exit{Reason: ExitStopped}},
	} {
		t.Run(strings.Join(tc.modes, ","), func(t *testing.T) {
			t.Parallel()
			ts := newTestSpawner(t, ProcessOptions{}, tc.modes...)
			c := ts.start(t, testSpec)
			var reports []Report
			if len(tc.modes) == 1 {
				// The forgeries come before the first heartbeat; the
				// reports up to it are checked with the rest.
				for {
					e := c.next()
					if e.Exit != nil {
						t.Fatalf("process exited (%+v) before a heartbeat", *e.Exit)
					}
					reports = append(reports, *e.Report)
					if e.Report.Type == ReportHeartbeat {
						break
					}
				}
				if err := c.p.Send(Command{Type: CommandStop}); err != nil {
					t.Fatal(err)
				}
			}
			exit, rest := c.waitExit()
			reports = append(reports, rest...)
			if exit != tc.want {
				t.Errorf("exit = %+v, want %+v", exit, tc.want)
			}
			for i, r := range reports {
				real := (i == 0 && r.Type == ReportReady && r.PID == c.p.PID() && r.Worker == "w1") ||
					(i > 0 && r.Type == ReportHeartbeat && r.MemoryMB == 1.5) ||
					(i == len(reports)-1 && r.Type == ReportExiting && r.Reason == ExitStopped && r.Unsaved == 0)
				if !real {
					t.Errorf("report %d is forged: %+v", i, r)
				}
			}
			out := ts.out.String()
			prefix := fmt.Sprintf("[sup mail,default %d] ", c.p.PID())
			forged, cut := 0, 0
			for line := range strings.Lines(out) {
				if !strings.HasPrefix(line, prefix) || len(line) > len(prefix)+MaxLineLength+len(truncatedMark)+1 {
					t.Fatalf("output line of %d bytes: %.200q", len(line), line)
				}
				if strings.HasPrefix(line, prefix+LinePrefix) {
					forged++
				}
				if strings.HasSuffix(line, truncatedMark+"\n") {
					cut++
				}
			}
			// Per stream, each of the 12 reports starts a line at least once
			// (the unterminated copy, after the copy with a newline), and each
			// of its two padded copies makes a line overlong.
			if n := len(forgeries()); forged < n/2 || cut < n {
				t.Errorf("%d output lines start with %q, %d are truncated; want at least %d and %d", forged, LinePrefix, cut, n/2, n)
			}
			logs := ts.logs.String()
			if n := strings.Count(logs, "level=WARN"); n != 1 || !strings.Contains(logs, "longer than 64 KiB") {
				t.Errorf("want one warning, about a long output line, got:\n%s", logs)
			}
		})
	}
}

// TestProcessExitCountsOnlyWhenTheStatusAgrees: a reported reason is how
// an exit counts only when the exit status agrees; otherwise it is a crash,
// and Describe says what was reported.
func TestProcessExitCountsOnlyWhenTheStatusAgrees(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reason ExitReason
		code   int
		want   ExitReason
	}{
		{ExitMaxJobs, 0, ExitMaxJobs},
		{ExitMaxJobs, 3, ExitCrash},
		{ExitMaxJobs, ExitCodeUnsaved, ExitMaxJobs},
		{ExitMaxMemory, 1, ExitCrash},
		{ExitMaxTime, 0, ExitMaxTime},
		{ExitEmpty, 2, ExitCrash},
		{ExitStopped, 1, ExitCrash},
		{ExitFenced, 0, ExitFenced},
		{ExitTimeout, ExitCodeJobTimedOut, ExitTimeout},
		{ExitTimeout, 0, ExitCrash},
		{ExitTimeout, 1, ExitCrash},
		{ExitError, 1, ExitError},
		{ExitError, 0, ExitCrash},
		{"reboot", 0, ExitCrash},
	} {
		t.Run(fmt.Sprintf("%s_%d", tc.reason, tc.code), func(t *testing.T) {
			t.Parallel()
			ts := newTestSpawner(t, ProcessOptions{}, fmt.Sprintf("exit=%s:%d", tc.reason, tc.code))
			c := ts.start(t, testSpec)
			exit, _ := c.waitExit()
			if want := (Exit{Reason: tc.want, Reported: tc.reason, Code: tc.code}); exit != want {
				t.Fatalf("exit = %+v, want %+v", exit, want)
			}
			want := fmt.Sprintf("exited with status %d", tc.code)
			if tc.want != tc.reason {
				want += " after reporting " + string(tc.reason)
			}
			if got := exit.Describe(); got != want {
				t.Errorf("Describe = %q, want %q", got, want)
			}
		})
	}
}

// TestProcessReportPipeIsNotInherited: a program the worker starts does not
// get its report pipe, so what it writes to descriptor 3 reaches nobody.
func TestProcessReportPipeIsNotInherited(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh")
	}
	ts := newTestSpawner(t, ProcessOptions{}, "subshell")
	c := ts.start(t, testSpec)
	exit, reports := c.waitExit()
	if exit != (Exit{Reason: ExitStopped, Reported: ExitStopped}) {
		t.Errorf("exit = %+v", exit)
	}
	for _, r := range reports {
		if r.Type == ReportHeartbeat {
			t.Errorf("the subshell's report arrived: %+v", r)
		}
	}
	if out := ts.out.String(); !strings.Contains(out, "] subshell: exit status") {
		t.Errorf("the subshell did not fail to write to descriptor 3:\n%s", out)
	}
}

// TestProcessExitWhileGrandchildHoldsReportPipe: the exit is sent although
// a process the worker started (a program that did not mark the pipe
// close-on-exec) still holds its report pipe.
func TestProcessExitWhileGrandchildHoldsReportPipe(t *testing.T) {
	t.Parallel()
	ts := newTestSpawner(t, ProcessOptions{}, "pipeholder")
	ts.waitDelay = 200 * time.Millisecond
	c := ts.start(t, testSpec)
	exit, _ := c.waitExit()
	if m := regexp.MustCompile(`grandchild (\d+)`).FindStringSubmatch(ts.out.String()); m != nil {
		gpid, _ := strconv.Atoi(m[1])
		t.Cleanup(func() { _ = syscall.Kill(gpid, syscall.SIGKILL) })
	} else {
		t.Errorf("no grandchild PID in output:\n%s", ts.out)
	}
	if exit.Reason != ExitStopped || exit.Code != 0 {
		t.Errorf("exit = %+v", exit)
	}
	if !strings.Contains(ts.logs.String(), "report pipe was still held open") {
		t.Errorf("logs:\n%s", ts.logs)
	}
}

func TestProcessKill(t *testing.T) {
	t.Parallel()
	ts := newTestSpawner(t, ProcessOptions{}, "sleep")
	c := ts.start(t, testSpec)
	c.report("ready", func(r Report) bool { return r.Type == ReportReady })
	if err := c.p.Kill(); err != nil {
		t.Fatal(err)
	}
	exit, _ := c.waitExit()
	if exit != (Exit{Reason: ExitCrash, Code: -1, Signal: "SIGKILL"}) {
		t.Fatalf("exit = %+v, want crash with code -1 by SIGKILL", exit)
	}
	if got := exit.Describe(); got != "killed by signal SIGKILL" {
		t.Fatalf("Describe = %q", got)
	}
}

func TestExitDescribe(t *testing.T) {
	for _, tc := range []struct {
		exit Exit
		want string
	}{
		{Exit{Code: 2}, "exited with status 2"},
		{Exit{Code: 0}, "exited with status 0"},
		{Exit{Code: -1, Signal: "SIGSEGV"}, "killed by signal SIGSEGV"},
	} {
		if got := tc.exit.Describe(); got != tc.want {
			t.Errorf("%+v.Describe() = %q, want %q", tc.exit, got, tc.want)
		}
	}
}

func TestProcessEnvironmentAndDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts := newTestSpawner(t, ProcessOptions{Dir: dir}, "maxjobs")
	ts.Env(valueEnv, "first")
	ts.Env(valueEnv, "second value")
	ts.Env("", "ignored")
	ts.Env(ProtocolFDEnv, "1") // the spawner's own announcement wins
	c := ts.start(t, testSpec)
	if exit, _ := c.waitExit(); exit.Reason != ExitMaxJobs {
		t.Fatalf("exit = %+v", exit)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := ts.out.String()
	for _, want := range []string{
		"] cwd " + realDir + "\n",
		"] env " + valueEnv + "=second value\n",
		"] path " + os.Getenv("PATH") + "\n", // inherited from the master
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(ts.logs.String(), "invalid environment variable name") {
		t.Errorf("Env with an empty key was not logged:\n%s", ts.logs)
	}
}

func TestProcessesShareOutputLineByLine(t *testing.T) {
	t.Parallel()
	ts := newTestSpawner(t, ProcessOptions{}, "chatty")
	children := make([]*child, 3)
	for i := range children {
		children[i] = ts.start(t, testSpec)
	}
	pids := map[string]bool{}
	for _, c := range children {
		if exit, _ := c.waitExit(); exit != (Exit{Reason: ExitStopped, Code: 0}) {
			t.Fatalf("exit = %+v, want stopped (exit 0 without a report)", exit)
		}
		pids[strconv.Itoa(c.p.PID())] = true
	}
	line := regexp.MustCompile(`^\[sup mail,default (\d+)\] line \d+ of (\d+) z{100}\n$`)
	n := 0
	for l := range strings.Lines(ts.out.String()) {
		if !strings.Contains(l, "] line ") {
			continue
		}
		m := line.FindStringSubmatch(l)
		if m == nil || m[1] != m[2] || !pids[m[1]] {
			t.Fatalf("mangled line %q", l)
		}
		n++
	}
	if n != 3*300 {
		t.Fatalf("%d chatty lines, want %d", n, 3*300)
	}
}

func TestSpawnFailure(t *testing.T) {
	t.Parallel()
	events := make(chan Event, 1)
	exe := filepath.Join(t.TempDir(), "no-such-worker")
	s, err := NewProcessSpawner(ProcessOptions{Executable: exe, Output: &syncBuffer{}})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Spawn(t.Context(), testSpec, events); err == nil || p != nil || !strings.Contains(err.Error(), exe) {
		t.Fatalf("Spawn = %v, %v; want an error naming %s", p, err, exe)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ts := newTestSpawner(t, ProcessOptions{})
	if _, err := ts.Spawn(ctx, testSpec, events); !errors.Is(err, context.Canceled) {
		t.Fatalf("Spawn with a cancelled context = %v", err)
	}
	select {
	case e := <-events:
		t.Fatalf("a failed Spawn sent %+v", e)
	default:
	}
}

// TestProcessExitWhileGrandchildHoldsOutput checks that the exit is
// reported although a process the worker started still holds its stdout.
func TestProcessExitWhileGrandchildHoldsOutput(t *testing.T) {
	t.Parallel()
	ts := newTestSpawner(t, ProcessOptions{}, "holder")
	ts.waitDelay = 200 * time.Millisecond
	start := time.Now()
	c := ts.start(t, testSpec)
	exit, _ := c.waitExit()
	took := time.Since(start)
	if m := regexp.MustCompile(`grandchild (\d+)`).FindStringSubmatch(ts.out.String()); m != nil {
		gpid, _ := strconv.Atoi(m[1])
		t.Cleanup(func() { _ = syscall.Kill(gpid, syscall.SIGKILL) })
	} else {
		t.Errorf("no grandchild PID in output:\n%s", ts.out)
	}
	if exit != (Exit{Reason: ExitStopped, Code: 0}) || took > childMaxSleep/2 {
		t.Fatalf("exit = %+v after %v", exit, took)
	}
	if !strings.Contains(ts.logs.String(), "still held open") {
		t.Errorf("logs:\n%s", ts.logs)
	}
}

// TestWorkerDiesWithItsMaster starts a child that starts a worker of its
// own, kills the child and checks that the kernel killed the worker too.
func TestWorkerDiesWithItsMaster(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	ts := newTestSpawner(t, ProcessOptions{}, "parent")
	c := ts.start(t, testSpec)
	re := regexp.MustCompile(`\] grandchild (\d+)\n`)
	var gpid int
	waitFor(t, "the grandchild's PID", eventTimeout, func() bool {
		m := re.FindStringSubmatch(ts.out.String())
		if m != nil {
			gpid, _ = strconv.Atoi(m[1])
		}
		return m != nil
	})
	if !alive(gpid) {
		t.Fatalf("grandchild %d is not running", gpid)
	}
	t.Cleanup(func() { _ = syscall.Kill(gpid, syscall.SIGKILL) })
	if err := c.p.Kill(); err != nil {
		t.Fatal(err)
	}
	if exit, _ := c.waitExit(); exit.Code != -1 {
		t.Fatalf("exit = %+v", exit)
	}
	waitFor(t, fmt.Sprintf("grandchild %d to die", gpid), 2*time.Second, func() bool { return !alive(gpid) })
}

// alive reports whether pid is a process that has not terminated (a zombie
// waiting to be reaped has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesized command name.
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

func TestWorkArgs(t *testing.T) {
	t.Parallel()
	base := []string{"fleet:work", "--supervisor", "sup", "--queue", "mail,default", "--master", "m1", "--worker-name", "w1", "--concurrency", "4"}
	for _, tc := range []struct {
		name string
		spec Spec
		want []string
	}{
		{"minimal", testSpec, base},
		{"everything", Spec{
			Supervisor: "sup", Queues: []string{"mail", "default"}, Master: "m1", Worker: "w1", Concurrency: 4,
			MaxJobs: 500, MaxTime: time.Hour, MaxMemoryMB: 256, Tries: 3, Backoff: []int{1, 5, 30},
			Timeout: 90 * time.Second, PayloadBudget: 8 << 20, Paused: true, PausedQueues: []string{"mail"}, MaxConns: 2, Isolate: true,
		}, append(slices.Clone(base),
			"--max-jobs", "500", "--max-time", "3600", "--max-memory-mb", "256", "--tries", "3",
			"--backoff", "1,5,30", "--timeout", "1m30s", "--payload-budget-bytes", "8388608", "--paused", "--paused-queues", "mail",
			"--max-conns", "2", "--isolate")},
		{"no byte budget", Spec{
			Supervisor: "s", Queues: []string{"q"}, Master: "m", Worker: "w", Concurrency: 1, PayloadBudget: -1,
		}, []string{"fleet:work", "--supervisor", "s", "--queue", "q", "--master", "m", "--worker-name", "w", "--concurrency", "1",
			"--payload-budget-bytes", "0"}},
		{"sub-second max time rounds up", Spec{
			Supervisor: "s", Queues: []string{"q"}, Master: "m", Worker: "w", Concurrency: 1,
			MaxTime: 1500 * time.Millisecond, Timeout: 250 * time.Millisecond,
		}, []string{"fleet:work", "--supervisor", "s", "--queue", "q", "--master", "m", "--worker-name", "w", "--concurrency", "1",
			"--max-time", "2", "--timeout", "250ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := WorkArgs(tc.spec); !slices.Equal(got, tc.want) {
				t.Errorf("WorkArgs =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
