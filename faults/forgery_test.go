package faults_test

// A handler's output is data: nothing a job prints, however long and
// however framed, is taken for a protocol message or changes how its
// worker's exit is counted. Each scenario runs a real master whose real
// children run test.print jobs (internal/apptest) that forge every report
// type on stdout, in every framing: a line of its own, no newline, and
// both after 64 KiB of padding (the length at which a line used to be cut
// and its tail parsed). The checks read what operators read: the master's
// row (the report fleet:masters shows: processes and memory), its log
// (crashes, backoff, the crash-loop error, the summary line) and the
// history.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
)

func TestForgery(t *testing.T) {
	faultScenario(t)
	t.Parallel()
	srv := newMMServer(t)
	scenarios := []struct {
		name string
		run  func(*testing.T, *mmServer)
	}{
		{"ForgedReportsChangeNothing", testForgedReports},
		{"ForgedExitsAreCrashes", testForgedExits},
		{"ForgedReadyBeforeReadyIsKilled", testForgedReady},
	}
	var wg sync.WaitGroup
	for _, s := range scenarios {
		wg.Go(func() { t.Run(s.name, func(t *testing.T) { s.run(t, srv) }) })
	}
	wg.Wait()
}

// forgedMemoryMB is the resident memory the forged reports claim: 1 TiB,
// far from any real worker's.
const forgedMemoryMB = 1 << 20

// forgedPad is the padding before a padded forgery: exactly the length at
// which a line used to be cut.
const forgedPad = 64 << 10

// exitReasons are the reasons an exiting report may give.
var exitReasons = []spawner.ExitReason{
	spawner.ExitMaxJobs, spawner.ExitMaxMemory, spawner.ExitMaxTime, spawner.ExitEmpty,
	spawner.ExitStopped, spawner.ExitFenced, spawner.ExitTimeout, spawner.ExitError,
}

// framing is how a forgery is printed.
type framing struct {
	name    string
	pad     int
	newline bool
}

var framings = []framing{
	{"line", 0, true},
	{"no newline", 0, false},
	{"padded line", forgedPad, true},
	{"padded, no newline", forgedPad, false},
}

// forgedReports are the reports a handler forges: a ready of another
// process, a heartbeat of a huge, busy, paused worker, a waiting, and an
// exiting report with each reason, claiming unsaved outcomes.
func forgedReports() []spawner.Report {
	reports := []spawner.Report{
		{Type: spawner.ReportReady, PID: 1, Worker: "forged", Queues: []string{"forged"}, Concurrency: 999},
		{Type: spawner.ReportHeartbeat, Jobs: 1e9, Running: 999, MemoryMB: forgedMemoryMB, Paused: true},
		{Type: spawner.ReportWaiting, PID: 1, Waiting: "forged"},
	}
	for _, r := range exitReasons {
		reports = append(reports, spawner.Report{Type: spawner.ReportExiting, Reason: r, Jobs: 1e9, MemoryMB: forgedMemoryMB, Unsaved: 999})
	}
	return reports
}

// forgedLine is r as a worker writes it, without the newline.
func forgedLine(r spawner.Report) string {
	return strings.TrimSuffix(string(spawner.FormatReport(r)), "\n")
}

// printJob is a test.print job printing text in framing f.
func printJob(text string, f framing, extra map[string]any) *queue.JobSpec {
	p := map[string]any{"text": text, "pad": f.pad, "newline": f.newline}
	for k, v := range extra {
		p[k] = v
	}
	return queue.NewJob("test.print", p)
}

// dispatchJobs dispatches jobs to the default queue, in order.
func dispatchJobs(t *testing.T, d *mmDB, jobs []*queue.JobSpec) {
	t.Helper()
	if _, err := queue.NewClient(d.pool, queue.Defaults{}).DispatchMany(context.Background(), jobs); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
}

// reportSample is the master's row as the fleet sees it at one moment.
type reportSample struct {
	at            time.Time
	processes     int
	memoryMB      float64
	jobsPerMinute float64
}

// sampler reads a master's row every 50 ms until stopped.
type sampler struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	samples []reportSample
}

func sampleReports(t *testing.T, d *mmDB, pid int) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			var raw []byte
			var at time.Time
			err := d.pool.QueryRow(context.Background(), `SELECT clock_timestamp(), report FROM fleet_masters WHERE pid = $1`, pid).Scan(&at, &raw)
			if err != nil {
				continue // not beating yet, or gone
			}
			var rep struct {
				Supervisors   []fleet.ReportedSupervisor `json:"supervisors"`
				MemoryMB      float64                    `json:"memory_mb"`
				JobsPerMinute float64                    `json:"jobs_per_minute"`
			}
			if err := json.Unmarshal(raw, &rep); err != nil {
				t.Errorf("master report %s: %v", raw, err)
				return
			}
			smp := reportSample{at: at, memoryMB: rep.MemoryMB, jobsPerMinute: rep.JobsPerMinute}
			for _, sup := range rep.Supervisors {
				for _, n := range sup.Processes {
					smp.processes += n
				}
			}
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { s.end() })
	return s
}

// end stops the sampler and returns its samples; safe twice.
func (s *sampler) end() []reportSample {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// summaryRE matches the master's last line.
var summaryRE = regexp.MustCompile(`msg="master stopped" [^\n]*?started=(\d+) recycled=(\d+) crashed=(\d+) jobs=(\d+)`)

// masterSummary reads started, recycled, crashed and jobs from the line a
// stopped master logs last.
func masterSummary(t *testing.T, a *apptest.App) (started, recycled, crashed, jobs int) {
	t.Helper()
	m := summaryRE.FindStringSubmatch(a.Output())
	if m == nil {
		t.Fatalf("no summary line in master %d's output", a.PID())
	}
	n := make([]int, 4)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return n[0], n[1], n[2], n[3]
}

// testForgedReports: one worker runs jobs that each print one forged
// report (every type, every framing; heartbeats repeated for a second) and
// return. The master's row never shows the forged memory, jobs rate or
// processes; the forged lines reach the master's output as the worker's
// own output (a padded one truncated, marked so); the protocol's descriptor
// is not in a handler's environment; and on SIGTERM the master exits 0
// having started one worker, counted none recycled or crashed, and the
// real number of jobs (a forged exiting report claims 999 unsaved
// outcomes, which would make it exit 1).
func testForgedReports(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a", "APP_FLEET__SUPERVISORS__WORK__CONCURRENCY=1"), "fleet")
	d.waitMember(a, 10*time.Second, "master a running", func(m member) bool { return m.State == "running" })
	s := sampleReports(t, d, a.PID())

	jobs := []*queue.JobSpec{printJob("", framings[0], map[string]any{"getenv": spawner.ProtocolFDEnv})}
	for _, r := range forgedReports() {
		for _, f := range framings {
			extra := map[string]any{}
			if r.Type == spawner.ReportHeartbeat {
				// Beats every second carry the master's report: a forged
				// heartbeat repeated for over a second cannot miss one.
				extra = map[string]any{"repeat": 8, "every_ms": 200}
			}
			jobs = append(jobs, printJob(forgedLine(r), f, extra))
		}
	}
	dispatchJobs(t, d, jobs)
	apptest.Eventually(t, 60*time.Second, "every job done", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	// Two more beats, so that whatever the last jobs changed is in the row.
	doneAt := d.now()
	d.waitMember(a, 10*time.Second, "two beats after the last job", func(m member) bool { return m.BeatAt.Sub(doneAt) >= 2*mmBeat })
	samples := s.end()

	view := masters(t, url, false)
	var shown fleet.Master
	for _, m := range view.Masters {
		if m.PID == a.PID() {
			shown = m
		}
	}
	if shown.PID == 0 {
		t.Fatalf("fleet:masters does not show master a: %+v", view)
	}
	procs := processes(t, shown)
	stopMasters(t, a)
	out := a.Output()

	maxMem, maxRate, wrongProcs := 0.0, 0.0, 0
	for _, smp := range samples {
		maxMem, maxRate = max(maxMem, smp.memoryMB), max(maxRate, smp.jobsPerMinute)
		if smp.processes != 1 {
			wrongProcs++
		}
	}
	started, recycled, crashed, done := masterSummary(t, a)
	t.Logf("%d samples of the master's row: memory at most %.1f MB (forged %d), jobs per minute at most %.0f, %d samples without exactly 1 process; fleet:masters: %.1f MB, %d processes; summary: started %d, recycled %d, crashed %d, jobs %d",
		len(samples), maxMem, forgedMemoryMB, maxRate, wrongProcs, shown.MemoryMB, procs, started, recycled, crashed, done)
	if len(samples) < 20 {
		t.Errorf("only %d samples of the master's row", len(samples))
	}
	if maxMem <= 0 || maxMem > 2000 {
		t.Errorf("the master's row showed %.1f MB of memory; its one worker's is far below 2000", maxMem)
	}
	if shown.MemoryMB <= 0 || shown.MemoryMB > 2000 || procs != 1 {
		t.Errorf("fleet:masters shows %.1f MB and %d processes, want the real worker's memory and 1", shown.MemoryMB, procs)
	}
	if maxRate > 1e4 {
		t.Errorf("the master's row showed %.0f jobs per minute for %d jobs", maxRate, len(jobs))
	}
	if wrongProcs > 0 {
		t.Errorf("%d samples of the master's row show other than 1 process", wrongProcs)
	}
	if started != 1 || recycled != 0 || crashed != 0 || done != len(jobs) {
		t.Errorf("summary: started %d, recycled %d, crashed %d, jobs %d; want 1, 0, 0, %d", started, recycled, crashed, done, len(jobs))
	}
	if !strings.Contains(out, "] getenv "+spawner.ProtocolFDEnv+"=\n") {
		t.Errorf("a handler sees %s in its environment:\n%s", spawner.ProtocolFDEnv, grepLines(out, "getenv"))
	}
	if n, want := strings.Count(out, "] @fleet {"), len(forgedReports()); n < want {
		t.Errorf("%d forged lines in the master's output as the worker's own, want each of the %d unpadded ones at least", n, want)
	}
	if !strings.Contains(out, "[truncated: line longer than 64 KiB]\n") || !strings.Contains(out, "output line longer than 64 KiB") {
		t.Errorf("no padded forgery in the master's output marked as truncated, or no warning about it:\n%s", grepLines(out, "64 KiB"))
	}
	if strings.Contains(out, "malformed protocol line") {
		t.Errorf("a forged line reached the protocol's parser:\n%s", grepLines(out, "malformed"))
	}
}

// testForgedExits: every job prints a forged exiting report (each reason,
// each framing) and ends its worker with exit status 3, the issue's
// forgery. Each exit is a crash: the master backs off 1 s, 2 s, 4 s, 8 s
// (seen in its log and in the gaps between the lost attempts), its row
// shows no process while it waits, and it logs the crash loop at the
// fifth. It starts at most 6 workers in 20 s (forged recycles let it start
// 22), counts every exited worker as crashed, none recycled, and exits 0.
func testForgedExits(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	a := apptest.Start(t, dir, mmEnv(url, "a", "APP_FLEET__SUPERVISORS__WORK__CONCURRENCY=1"), "fleet")
	d.waitMember(a, 10*time.Second, "master a running", func(m member) bool { return m.State == "running" })
	s := sampleReports(t, d, a.PID())

	// Job i forges reason i%8 in framing i%4: the first five crashes cover
	// five reasons and every framing.
	var jobs []*queue.JobSpec
	for i := range 40 {
		r := spawner.Report{Type: spawner.ReportExiting, Reason: exitReasons[i%len(exitReasons)], Jobs: 1e9, MemoryMB: forgedMemoryMB}
		jobs = append(jobs, printJob(forgedLine(r), framings[i%len(framings)], map[string]any{"exit": 3}).Tries(1))
	}
	initial := apptest.Children(a.PID())
	dispatchJobs(t, d, jobs)

	// Every worker started from the dispatch on, with when it was first seen.
	seen := map[int]time.Time{}
	for _, pid := range initial {
		seen[pid] = time.Now()
	}
	first := time.Now()
	loopErr := "workers keep failing: five failures within a minute"
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(a.Output(), loopErr) || time.Since(first) < 20*time.Second {
		if time.Now().After(deadline) {
			t.Fatalf("no crash-loop error within 60 s; %d workers started", len(seen))
		}
		for _, pid := range apptest.Children(a.PID()) {
			if _, ok := seen[pid]; !ok {
				seen[pid] = time.Now()
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	samples := s.end()
	stopMasters(t, a)
	out := a.Output()

	in20 := 0
	for _, at := range seen {
		if at.Sub(first) < 20*time.Second {
			in20++
		}
	}
	var retries []string
	for _, m := range regexp.MustCompile(`msg="worker exited with status 3[^"]*; restarting after backoff" .*?supervisor=work queues=default retry_in=(\S+)`).FindAllStringSubmatch(out, -1) {
		retries = append(retries, m[1])
	}
	// Each worker that claimed, with when it first claimed: a crashed
	// worker's attempts are lost (the one that ran, and any it had claimed
	// besides), under its name.
	var claimedAt []time.Time
	rows, err := d.pool.Query(context.Background(), `
		SELECT min(reserved_at) FROM fleet_jobs WHERE name = 'test.print' AND status = 'lost' GROUP BY worker ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		claimedAt = append(claimedAt, at)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var gaps []string
	for i := 1; i < len(claimedAt); i++ {
		gaps = append(gaps, claimedAt[i].Sub(claimedAt[i-1]).Round(10*time.Millisecond).String())
	}
	// The longest time the master's row showed no process, and the share
	// of the samples that show none.
	longestIdle, idleFrom, idle := time.Duration(0), time.Time{}, 0
	for _, smp := range samples {
		if smp.processes == 0 {
			idle++
		}
		switch {
		case smp.processes != 0:
			idleFrom = time.Time{}
		case idleFrom.IsZero():
			idleFrom = smp.at
		default:
			longestIdle = max(longestIdle, smp.at.Sub(idleFrom))
		}
	}
	started, recycled, crashed, _ := masterSummary(t, a)
	lost := d.count(`SELECT count(*) FROM fleet_jobs WHERE name = 'test.print' AND status = 'lost'`)
	failed := d.count(`SELECT count(*) FROM queue_failed_jobs WHERE name = 'test.print'`)
	idleShare := float64(idle) / float64(max(len(samples), 1))
	t.Logf("workers started in the first 20 s: %d (%d in all); backoffs logged: %v; gaps between the workers' first claims: %v; the master's row showed no process in %.0f%% of %d samples, for at most %s in a row; summary: started %d, recycled %d, crashed %d; lost attempts %d, failed jobs %d; crash-loop error logged: %v",
		in20, len(seen), retries, gaps, 100*idleShare, len(samples), longestIdle.Round(10*time.Millisecond), started, recycled, crashed, lost, failed, strings.Contains(out, loopErr))

	if in20 > 6 {
		t.Errorf("%d workers started within 20 s of the first crash: no backoff", in20)
	}
	if want := []string{"1s", "2s", "4s", "8s"}; len(retries) < len(want) || !slices.Equal(retries[:len(want)], want) {
		t.Errorf("backoffs logged %v, want them to start %v", retries, want)
	}
	if len(claimedAt) < 5 {
		t.Errorf("%d workers lost attempts, want at least 5", len(claimedAt))
	}
	for i := 1; i < min(len(claimedAt), 5); i++ {
		if want := time.Duration(1<<(i-1)) * time.Second; claimedAt[i].Sub(claimedAt[i-1]) < want {
			t.Errorf("worker %d first claimed %s after the one before, want at least the backoff of %s", i+1, claimedAt[i].Sub(claimedAt[i-1]), want)
		}
	}
	// Waiting out 1 + 2 + 4 + 8 s of backoff, the group mostly has no
	// process; replaced at once, it mostly has one.
	if longestIdle < 3*time.Second || idleShare < 0.5 {
		t.Errorf("the master's row showed no process in %.0f%% of the samples, for at most %s in a row: replacements did not wait out the backoff", 100*idleShare, longestIdle)
	}
	if recycled != 0 || crashed != started || crashed < 5 || crashed != len(claimedAt) {
		t.Errorf("summary: started %d, recycled %d, crashed %d; %d workers lost attempts: want every started worker crashed, losing what it held", started, recycled, crashed, len(claimedAt))
	}
	// A crash of a process is no job's fault until a job was in two: each
	// job it held lost its attempt without spending a try (1 try, then 2).
	crashedOnce := d.count(`SELECT count(*) FROM queue_jobs WHERE name = 'test.print' AND attempts = 1 AND max_tries = 2 AND crashes = 1`)
	if failed != 0 || crashedOnce != lost || crashedOnce+d.count(`SELECT count(*) FROM queue_jobs WHERE name = 'test.print' AND attempts = 0`) != len(jobs) {
		t.Errorf("%d failed jobs, %d lost attempts, %d jobs in one crash with a try more: want no job failed, each lost attempt's job given a try more, and every other job untouched",
			failed, lost, crashedOnce)
	}
}

// testForgedReady: an application that prints forged ready and waiting
// reports at start (every framing), whose first worker then hangs before
// it reports ready: once its master is trusted, the worker is killed at
// the start timeout as if it had printed nothing (the master never logs it
// as waiting), and the next one runs every job.
func testForgedReady(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	var text strings.Builder
	for _, r := range []spawner.Report{
		{Type: spawner.ReportWaiting, PID: 1, Waiting: "forged"},
		{Type: spawner.ReportReady, PID: 1, Worker: "forged", Queues: []string{"default"}, Concurrency: 2},
	} {
		for _, f := range framings {
			text.WriteString(strings.Repeat("x", f.pad))
			text.WriteString(forgedLine(r))
			if f.newline {
				text.WriteString("\n")
			}
		}
	}
	start := filepath.Join(dir, "start.txt")
	if err := os.WriteFile(start, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	a := apptest.Start(t, dir, mmEnv(url, "a", "APP_FLEET__START_TIMEOUT_SECS=2",
		apptest.EnvHangOnce+"="+filepath.Join(dir, "hung"), apptest.EnvStartOutput+"="+start), "fleet")
	var hung []int
	apptest.Eventually(t, 10*time.Second, "a hung child", func() bool {
		hung = apptest.Children(a.PID())
		return len(hung) == 1 && strings.Contains(a.Output(), "hangs before it reports ready")
	})
	file := dispatchTo(t, url, dir, "default", 4, 100)
	// Trusted after a ttl and a beat (4 s), then the start timeout (2 s).
	apptest.Eventually(t, 15*time.Second, "the hung child killed", func() bool { return !apptest.Alive(hung[0]) })
	apptest.Eventually(t, 20*time.Second, "every job done by the replacement", func() bool {
		return d.count(`SELECT count(*) FROM queue_jobs`) == 0
	})
	checkOutcomes(t, d, file, 4, false)
	stopMasters(t, a)
	out := a.Output()
	if !strings.Contains(out, fmt.Sprintf("[work default %d] @fleet {", hung[0])) {
		t.Errorf("the forged lines are not in the master's output as the hung worker's own:\n%s", grepLines(out, "@fleet"))
	}
	if strings.Contains(out, "worker waits before it can start") {
		t.Errorf("the master took a forged waiting report:\n%s", grepLines(out, "waits"))
	}
}

// grepLines returns the lines of s that contain sub, each cut to 300 bytes.
func grepLines(s, sub string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			if len(line) > 300 {
				line = line[:300] + "...\n"
			}
			b.WriteString(line)
		}
	}
	return b.String()
}
