package cmd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// appJobs are the handlers of the test binary acting as the application.
func appJobs() *queue.Registry {
	jobs := queue.NewRegistry()
	jobs.Handle("demo.noop", func(context.Context, *queue.Job) error { return nil })
	// test.sleep sleeps, then appends its id to a file: a line per completed
	// run, so a test can tell a job that ran twice.
	jobs.Handle("test.sleep", func(ctx context.Context, j *queue.Job) error {
		var p struct {
			MS   int    `json:"ms"`
			File string `json:"file"`
		}
		if err := j.Decode(&p); err != nil {
			return err
		}
		select {
		case <-time.After(time.Duration(p.MS) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		f, err := os.OpenFile(p.File, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = fmt.Fprintf(f, "%d\n", j.ID)
		return err
	})
	return jobs
}

// app is the application running as a real process: a master.
type app struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  strings.Builder
}

func startApp(t *testing.T, dir string, env []string, args ...string) *app {
	t.Helper()
	c := exec.Command(os.Args[0], args...)
	c.Dir = dir
	c.Env = append(os.Environ(), append([]string{envAppMode + "=1"}, env...)...)
	a := &app{cmd: c, done: make(chan struct{})}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout, c.Stderr = pw, pw
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			a.mu.Lock()
			a.out.WriteString(sc.Text() + "\n")
			a.mu.Unlock()
		}
		pr.Close()
	}()
	go func() { _ = c.Wait(); close(a.done) }()
	t.Cleanup(func() {
		_ = c.Process.Kill()
		<-a.done
		if t.Failed() {
			t.Logf("app output:\n%s", a.output())
		}
	})
	return a
}

func (a *app) output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.out.String()
}

// children returns the pids of the processes whose parent is pid.
func children(pid int) []int {
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

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func query(t *testing.T, url, sql string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// dispatchSleeps dispatches n test.sleep jobs and returns the file their
// runs are recorded in.
func dispatchSleeps(t *testing.T, url, dir string, n, ms int) string {
	t.Helper()
	file := filepath.Join(dir, "runs.txt")
	payload, _ := json.Marshal(map[string]any{"ms": ms, "file": file})
	r := run(t, dir, dbEnv(url), "dispatch", "--name", "test.sleep", "--count", strconv.Itoa(n), "--payload", string(payload))
	if r.code != 0 {
		t.Fatalf("dispatch: %+v", r)
	}
	return file
}

// runsOnce checks that each of n jobs completed exactly once.
func runsOnce(t *testing.T, file string, n int) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, id := range strings.Fields(string(b)) {
		seen[id]++
	}
	if len(seen) != n {
		t.Fatalf("%d distinct jobs completed, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("job %s completed %d times", id, c)
		}
	}
}

func fleetEnv(url string, extra ...string) []string {
	return append([]string{
		"APP_DATABASE__URL=" + url,
		"APP_FLEET__MASTER_TTL_SECS=3",
		"APP_FLEET__HTTP__ADDR=", // several masters run at once: no listener
		"APP_FLEET__SUPERVISORS__WORK__QUEUES=default",
		"APP_FLEET__SUPERVISORS__WORK__BALANCE=off",
		"APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=2",
		"APP_FLEET__SUPERVISORS__WORK__CONCURRENCY=2",
	}, extra...)
}

func TestFleetReplacesKilledWorker(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	file := dispatchSleeps(t, url, dir, 8, 1500)
	master := startApp(t, dir, fleetEnv(url), "fleet")
	pid := master.cmd.Process.Pid
	eventually(t, 10*time.Second, "two workers running jobs", func() bool {
		return len(children(pid)) == 2 && query(t, url, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`) == 4
	})
	before := children(pid)
	if err := syscall.Kill(before[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The restart backoff is 1 s plus up to a quarter of jitter; a loaded
	// machine adds the time to start a process.
	eventually(t, 6*time.Second, "a replacement worker", func() bool {
		now := children(pid)
		return len(now) == 2 && !slices.Contains(now, before[0])
	})
	if d := time.Since(killed); d > 4*time.Second {
		t.Errorf("replacement took %s, want about the 1 s backoff", d)
	}
	eventually(t, 30*time.Second, "every job done", func() bool {
		return query(t, url, `SELECT count(*) FROM queue_jobs`) == 0
	})
	runsOnce(t, file, 8)
	if err := master.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-master.done
	if code := master.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("master exited %d", code)
	}
	if !strings.Contains(master.output(), "1 crashed") {
		t.Errorf("summary does not count the crash:\n%s", master.output())
	}
}

func TestFleetSurvivesKilledMaster(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	file := dispatchSleeps(t, url, dir, 6, 3000)
	first := startApp(t, dir, fleetEnv(url), "fleet")
	pid := first.cmd.Process.Pid
	eventually(t, 10*time.Second, "workers running jobs", func() bool {
		return len(children(pid)) == 2 && query(t, url, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`) == 4
	})
	workers := children(pid)
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "the dead master's workers to die with it", func() bool {
		return !alive(workers[0]) && !alive(workers[1])
	})
	restarted := time.Now()
	second := startApp(t, dir, fleetEnv(url), "fleet")
	// The first master's row expires after its ttl (3 s); then the new
	// master releases its jobs and runs them (3 s each, two rounds).
	eventually(t, 20*time.Second, "every job done", func() bool {
		return query(t, url, `SELECT count(*) FROM queue_jobs`) == 0
	})
	t.Logf("all jobs done %s after the restart", time.Since(restarted).Round(100*time.Millisecond))
	runsOnce(t, file, 6)
	_ = second.cmd.Process.Signal(syscall.SIGTERM)
	<-second.done
}

func TestFleetOperatorCommands(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	env := fleetEnv(url)
	r := run(t, dir, env, "fleet:status")
	if r.code != 1 || !strings.Contains(r.stdout, "Inactive") {
		t.Fatalf("status without a master: %+v", r)
	}
	master := startApp(t, dir, env, "fleet")
	eventually(t, 10*time.Second, "the master to report Running", func() bool {
		r := run(t, dir, env, "fleet:status")
		return r.code == 0 && strings.HasPrefix(r.stdout, "Running")
	})
	if r := run(t, dir, env, "fleet:pause"); r.code != 0 {
		t.Fatalf("pause: %+v", r)
	}
	eventually(t, 5*time.Second, "Paused", func() bool {
		return strings.HasPrefix(run(t, dir, env, "fleet:status").stdout, "Paused")
	})
	dispatchSleeps(t, url, dir, 3, 10)
	time.Sleep(1500 * time.Millisecond) // a paused fleet must leave them alone this long
	if n := query(t, url, `SELECT count(*) FROM queue_jobs WHERE attempts = 0`); n != 3 {
		t.Fatalf("%d untouched jobs while paused, want 3", n)
	}
	if r := run(t, dir, env, "fleet:continue"); r.code != 0 {
		t.Fatalf("continue: %+v", r)
	}
	eventually(t, 10*time.Second, "the jobs to run after continue", func() bool {
		return query(t, url, `SELECT count(*) FROM queue_jobs`) == 0
	})
	if r := run(t, dir, env, "fleet:pause", "nope"); r.code == 0 || !strings.Contains(r.stderr, `no supervisor named "nope"`) {
		t.Fatalf("pause of an unknown supervisor: %+v", r)
	}
	if r := run(t, dir, env, "fleet:terminate"); r.code != 0 || !strings.Contains(r.stdout, "asked 1 running master") {
		t.Fatalf("terminate: %+v", r)
	}
	select {
	case <-master.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the master did not terminate")
	}
	if code := master.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("terminated master exited %d", code)
	}
	// A master started after the request keeps running.
	later := startApp(t, dir, env, "fleet")
	eventually(t, 10*time.Second, "the new master to report Running", func() bool {
		return run(t, dir, env, "fleet:status").code == 0
	})
	time.Sleep(1500 * time.Millisecond)
	select {
	case <-later.done:
		t.Fatalf("a master started after fleet:terminate stopped:\n%s", later.output())
	default:
	}
}

func TestFleetBootRules(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		env  []string
		want string
	}{
		"auto min × queues > max": {[]string{"APP_FLEET__SUPERVISORS__BIG__QUEUES=a,b,c", "APP_FLEET__SUPERVISORS__BIG__MAX_PROCESSES=2"}, "fleet.supervisors.big"},
		"simple max < queues":     {[]string{"APP_FLEET__SUPERVISORS__S__QUEUES=a,b,c", "APP_FLEET__SUPERVISORS__S__BALANCE=simple", "APP_FLEET__SUPERVISORS__S__MAX_PROCESSES=2"}, "fleet.supervisors.s"},
		"empty queues":            {[]string{"APP_FLEET__SUPERVISORS__E__QUEUES="}, "fleet.supervisors.e.queues"},
		"unknown only":            {[]string{"APP_FLEET__ONLY=exports"}, `fleet.only: no supervisor named "exports"`},
		"memory driver":           {[]string{"APP_QUEUE__DRIVER=memory"}, "queue.driver"},
		// PostgreSQL unreachable when the master starts: one line naming
		// the database (its password hidden), nothing started.
		"database unreachable": {nil, "cannot reach database postgres://app:xxxxx@127.0.0.1:1/app"},
		"beat interval vs ttl": {[]string{"APP_FLEET__MASTER_TTL_SECS=2", "APP_FLEET__BEAT_INTERVAL_MS=1000"}, "fleet.beat_interval_ms: must be below half of fleet.master_ttl_secs"},
		"name with a brace":    {[]string{"APP_FLEET__NAME=web{1}"}, "fleet.name"},
	}
	for name, c := range cases {
		r := run(t, t.TempDir(), append(dbEnv("postgres://app:hunter2@127.0.0.1:1/app"), c.env...), "fleet")
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || strings.Contains(r.stderr, "hunter2") {
			t.Errorf("%s: %+v, want one line naming %q", name, r, c.want)
		}
	}
}
