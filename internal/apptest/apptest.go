// Package apptest runs the application built on package cmd as real
// processes, for the tests of cmd and of the fault suite (package faults).
// A test binary whose TestMain is Main acts as the application itself when
// started with EnvAppMode set, so a master it starts spawns real copies of
// it as its children, each with the handlers of Jobs.
//
// A few environment variables make the application misbehave on purpose,
// the way a broken deploy or a broken job would:
//   - EnvCrashQueue=Q: a worker of queue Q exits 1 at start, every time.
//   - EnvHangOnce=FILE: the first worker started (the one that creates
//     FILE) hangs before it reports ready; every later one runs.
//   - EnvStartOutput=FILE: every worker writes what FILE holds, as it is,
//     to its stdout before it starts (before a hang of EnvHangOnce too), as
//     an application that prints something at start would.
//
// And one gives it a periodic job registered in Go:
//   - EnvPeriodicRuns=FILE: the registry has the periodic job "code-tick"
//     (see Jobs).
package apptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/cmd"
	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// The environment variables the test application reads.
const (
	// EnvAppMode=1 makes the test binary act as the application.
	EnvAppMode = "FLEET_TEST_APP"
	// EnvCrashQueue names a queue whose workers exit 1 at start.
	EnvCrashQueue = "FLEET_TEST_CRASH_QUEUE"
	// EnvHangOnce names a file: the worker that creates it hangs before it
	// reports ready.
	EnvHangOnce = "FLEET_TEST_HANG_ONCE"
	// EnvStartOutput names a file every worker copies to its stdout at
	// start.
	EnvStartOutput = "FLEET_TEST_START_OUTPUT"
	// EnvPeriodicRuns names the runs file of the periodic job "code-tick"
	// and registers it (see Jobs).
	EnvPeriodicRuns = "FLEET_TEST_PERIODIC_RUNS"
)

// CrashLine is what demo.crash writes to stderr before it exits.
const CrashLine = "demo.crash: exiting the whole process with status 3"

// Main is the TestMain of a package that starts the application: in app
// mode it runs the application and exits; otherwise it runs the tests
// (with pgtest's server, see pgtest.Main).
func Main(m *testing.M) {
	if os.Getenv(EnvAppMode) != "1" {
		pgtest.Main(m)
		return
	}
	work := len(os.Args) > 1 && os.Args[1] == "fleet:work"
	if q := os.Getenv(EnvCrashQueue); work && q != "" && slices.Contains(os.Args, q) {
		fmt.Fprintln(os.Stderr, "test: this worker fails at start")
		os.Exit(1)
	}
	if f := os.Getenv(EnvStartOutput); work && f != "" {
		text, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "test:", err)
			os.Exit(1)
		}
		_, _ = os.Stdout.Write(text)
	}
	if f := os.Getenv(EnvHangOnce); work && f != "" {
		if h, err := os.OpenFile(f, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
			h.Close()
			fmt.Fprintln(os.Stderr, "test: this worker hangs before it reports ready")
			select {} // until its master kills it
		}
	}
	os.Exit(cmd.Execute(cmd.App{Jobs: Jobs()}))
}

// Jobs are the handlers of the test application:
//   - demo.noop does nothing.
//   - test.echo fails with its payload in the error, as careless handlers do.
//   - test.sleep sleeps {"ms": N}, then appends its id to {"file": F}: a line
//     per completed run, so a test can tell a job that ran twice. With
//     {"started": S} it also appends its id to S as it starts.
//   - test.exit ends its whole process with exit status 3, every time: a
//     poison job.
//   - demo.crash does what the example app's demo.crash does: it writes
//     CrashLine to stderr and ends its whole process with exit status 3.
//   - test.stuck sleeps {"ms": N}, ignoring its context: a job that
//     ignores its timeout.
//   - test.beside runs beside a stuck job (see besideJob): it may wait for
//     the stuck job's history row, sleeps, and records its attempt and
//     tries (ReadAttempts).
//   - test.print writes {"text": T} to stdout as it is, the way a handler
//     printing what a user sent does: after {"pad": N} bytes of "x", with
//     a newline when {"newline": true}, {"repeat": N} times (at least once)
//     {"every_ms": M} apart; {"getenv": NAME} adds a line "getenv NAME=VALUE"
//     first. Then, with {"exit": N} other than 0, it ends its whole process
//     with exit status N.
//
// With EnvPeriodicRuns=FILE set, it also registers the periodic job
// "code-tick": @every 1s, a test.sleep of 0 ms that appends its id to
// FILE, on the default queue with priority -3 and the tag "periodic", and
// the tick in its payload under "tick"; a tick missed by a busy machine is
// dispatched late rather than skipped (catch-up all).
func Jobs() *queue.Registry {
	jobs := queue.NewRegistry()
	jobs.Handle("demo.noop", func(context.Context, *queue.Job) error { return nil })
	jobs.Handle("test.echo", func(_ context.Context, j *queue.Job) error { return fmt.Errorf("bad input %s", j.Payload) })
	jobs.Handle("test.sleep", func(ctx context.Context, j *queue.Job) error {
		var p struct {
			MS      int    `json:"ms"`
			File    string `json:"file"`
			Started string `json:"started"`
		}
		if err := j.Decode(&p); err != nil {
			return err
		}
		if p.Started != "" {
			if err := AppendRun(p.Started, j.ID); err != nil {
				return err
			}
		}
		select {
		case <-time.After(time.Duration(p.MS) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return AppendRun(p.File, j.ID)
	})
	jobs.Handle("test.exit", func(context.Context, *queue.Job) error {
		os.Exit(3)
		return nil
	})
	jobs.Handle("demo.crash", func(context.Context, *queue.Job) error {
		fmt.Fprintln(os.Stderr, CrashLine)
		os.Exit(3)
		return nil
	})
	jobs.Handle("test.print", printJob)
	stuckJobs(jobs)
	if f := os.Getenv(EnvPeriodicRuns); f != "" {
		jobs.Periodic("code-tick", "@every 1s",
			queue.NewJob("test.sleep", map[string]any{"ms": 0, "file": f}).Priority(-3).Tags("periodic"),
			queue.PeriodicOpts{TickKey: "tick", CatchUp: queue.CatchUpAll})
	}
	return jobs
}

// printJob is the handler of test.print.
func printJob(ctx context.Context, j *queue.Job) error {
	var p struct {
		Text    string `json:"text"`
		Pad     int    `json:"pad"`
		Newline bool   `json:"newline"`
		Repeat  int    `json:"repeat"`
		EveryMS int    `json:"every_ms"`
		Getenv  string `json:"getenv"`
		Exit    int    `json:"exit"`
	}
	if err := j.Decode(&p); err != nil {
		return err
	}
	if p.Getenv != "" {
		v, _ := os.LookupEnv(p.Getenv)
		fmt.Printf("getenv %s=%s\n", p.Getenv, v)
	}
	out := strings.Repeat("x", p.Pad) + p.Text
	if p.Newline {
		out += "\n"
	}
	for i := range max(p.Repeat, 1) {
		if i > 0 {
			select {
			case <-time.After(time.Duration(p.EveryMS) * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if _, err := os.Stdout.WriteString(out); err != nil {
			return err
		}
	}
	if p.Exit != 0 {
		os.Exit(p.Exit)
	}
	return nil
}

// AppendRun records a completed run of job id in file.
func AppendRun(file string, id int64) error {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d\n", id)
	return errors.Join(err, f.Close())
}

// ReadRuns returns how many runs of each job file records (see
// AppendRun); a file not written yet records none.
func ReadRuns(t testing.TB, file string) map[int64]int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	runs := map[int64]int{}
	for _, f := range strings.Fields(string(b)) {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("runs file line %q", f)
		}
		runs[id]++
	}
	return runs
}

// Result is how a command line ended.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run executes the application's command line in this process, in dir
// with only env as environment.
func Run(t testing.TB, dir string, env []string, args ...string) Result {
	t.Helper()
	var out, errb bytes.Buffer
	code := cmd.ExecuteContext(context.Background(), cmd.App{
		Jobs: Jobs(), Args: args, Environ: env, Dir: dir, Stdout: &out, Stderr: &errb,
	})
	return Result{code, out.String(), errb.String()}
}

// DBEnv is the environment of a command on the database at url.
func DBEnv(url string) []string { return []string{"APP_DATABASE__URL=" + url} }

// FleetEnv is the environment of a master on url made for tests: a ttl of
// 3 s, no HTTP listener (several masters run at once), one supervisor
// "work" of the default queue with two processes of two jobs each, not
// balanced; extra adds to it or overrides it.
func FleetEnv(url string, extra ...string) []string {
	return append([]string{
		"APP_DATABASE__URL=" + url,
		"APP_FLEET__MASTER_TTL_SECS=3",
		"APP_FLEET__HTTP__ADDR=",
		"APP_FLEET__SUPERVISORS__WORK__QUEUES=default",
		"APP_FLEET__SUPERVISORS__WORK__BALANCE=off",
		"APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=2",
		"APP_FLEET__SUPERVISORS__WORK__CONCURRENCY=2",
	}, extra...)
}

// App is the application running as a real process.
type App struct {
	Cmd *exec.Cmd
	// Done is closed once the process has exited and been waited for, and
	// its output read.
	Done chan struct{}
	mu   sync.Mutex
	out  strings.Builder
}

// Start starts the application with args in dir, with env added to this
// process's environment. The test's end kills it if it still runs, and
// logs its output if the test failed.
func Start(t testing.TB, dir string, env []string, args ...string) *App {
	t.Helper()
	if testing.Short() {
		t.Skip("end to end: starts the application as processes of its own; runs without -short")
	}
	c := exec.Command(os.Args[0], args...)
	c.Dir = dir
	c.Env = append(os.Environ(), append([]string{EnvAppMode + "=1"}, env...)...)
	a := &App{Cmd: c, Done: make(chan struct{})}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout, c.Stderr = pw, pw
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	read := make(chan struct{})
	go func() {
		// Copied as it comes, not line by line: a line of any length (a
		// child's truncated one is over 64 KiB with its prefix) is taken
		// in, and the process never blocks on, or dies of, a reader that
		// gave up.
		defer close(read)
		_, _ = io.Copy(appOutput{a}, pr)
		pr.Close()
	}()
	go func() {
		_ = c.Wait()
		// Let the reader take in the last lines, unless a child of the
		// process still holds the pipe open.
		select {
		case <-read:
		case <-time.After(time.Second):
		}
		close(a.Done)
	}()
	t.Cleanup(func() {
		_ = c.Process.Kill()
		<-a.Done
		select {
		case <-read:
		case <-time.After(5 * time.Second): // a child still holds the pipe
			pr.Close()
		}
		if t.Failed() {
			t.Logf("app output (pid %d):\n%s", c.Process.Pid, a.Output())
		}
	})
	return a
}

// appOutput appends what the process writes to its output.
type appOutput struct{ a *App }

func (o appOutput) Write(p []byte) (int, error) {
	o.a.mu.Lock()
	defer o.a.mu.Unlock()
	return o.a.out.Write(p)
}

// PID is the process id.
func (a *App) PID() int { return a.Cmd.Process.Pid }

// Output is what the process wrote so far, stdout and stderr together.
func (a *App) Output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.out.String()
}

// Children returns the pids of the live processes whose parent is pid.
func Children(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) && fields[0] != "Z" {
			out = append(out, child)
		}
	}
	slices.Sort(out)
	return out
}

// ProcState is the state letter of pid in /proc (R, S, T, Z, ...), 0 when
// it does not exist.
func ProcState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) == 0 || fields[0] == "" {
		return 0
	}
	return fields[0][0]
}

// Alive reports whether pid runs (a zombie does not).
func Alive(pid int) bool {
	s := ProcState(pid)
	return s != 0 && s != 'Z'
}

// Slack multiplies every deadline of Eventually (testwait.Slack). The
// deadlines of these tests only catch hangs: what they wait for is a
// process starting, a beat, a child replaced, which an idle machine does
// in well under the time a test names, and a busy one several times
// slower. A passing test waits no longer for it; a hung one fails that
// much later.
const Slack = testwait.Slack

// Eventually waits until cond holds, and fails the test if it does not
// within Slack times the given time (testwait.Eventually).
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, Slack*within, what, cond)
}

// Within reports whether cond holds within Slack times d (testwait.Within).
func Within(d time.Duration, cond func() bool) bool { return testwait.Within(Slack*d, cond) }
