package cmd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/bench"
	"github.com/fleet-go/fleet/cmd"
	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/worker"
)

// runProcess runs the test binary as the application, as a real process
// (so that the bench's master starts real fleet:work children of it).
func runProcess(t *testing.T, env []string, args ...string) result {
	t.Helper()
	if testing.Short() {
		t.Skip("end to end: runs the application as a process of its own; runs without -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, os.Args[0], args...)
	c.Dir = t.TempDir()
	c.Env = append(os.Environ(), append([]string{apptest.EnvAppMode + "=1"}, env...)...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return result{code, out.String(), errb.String()}
}

type benchRate struct {
	Jobs       int64   `json:"jobs"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	VsBound    float64 `json:"vs_bound"`
}

type benchDoc struct {
	Scenarios []string `json:"scenarios"`
	Bound     *struct {
		Batch100  benchRate `json:"batch_100"`
		Batch1000 benchRate `json:"batch_1000"`
		Reference float64   `json:"reference_jobs_per_sec"`
		Durable   *struct {
			Connections int       `json:"connections"`
			Batch       int       `json:"batch"`
			Rate        benchRate `json:"rate"`
		} `json:"durable"`
	} `json:"bound"`
	Paths *struct {
		Rounds int `json:"rounds"`
		High   struct {
			JobsPerSec []float64 `json:"jobs_per_sec"`
			Median     float64   `json:"median_jobs_per_sec"`
		} `json:"one_process_high"`
		LowVsHigh       float64 `json:"low_vs_high"`
		MasterVsOne     float64 `json:"master_vs_one_process"`
		MasterVsDurable float64 `json:"master_vs_durable_bound"`
	} `json:"paths"`
	Drain *struct {
		Processes int       `json:"processes"`
		Rate      benchRate `json:"rate"`
		Failed    int64     `json:"failed"`
		VsDurable float64   `json:"vs_durable_bound"`
	} `json:"drain"`
}

func TestBenchBoundAndDrain(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)

	r := runProcess(t, env, "bench", "--scenario", "bound", "--jobs", "2000", "--json")
	if r.code != 0 {
		t.Fatalf("bench bound: %+v", r)
	}
	var doc benchDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("bench bound: stdout is not one JSON document: %v\n%s", err, r.stdout)
	}
	if doc.Bound == nil || doc.Bound.Batch100.Jobs != 2000 || doc.Bound.Batch1000.Jobs != 2000 ||
		doc.Bound.Batch100.JobsPerSec <= 0 || doc.Bound.Reference <= 0 || doc.Bound.Batch1000.VsBound != 1 {
		t.Fatalf("bound figures: %s", r.stdout)
	}
	// The durable bound drains its own 2000 jobs through fleet's claim and
	// finish, at the drain worker's batch.
	if d := doc.Bound.Durable; d == nil || d.Rate.Jobs != 2000 || d.Rate.JobsPerSec <= 0 || d.Batch != worker.DefaultPrefetch || d.Connections != 4 {
		t.Fatalf("durable bound figures: %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "bound batch") && !strings.Contains(r.stderr, "== bound") {
		t.Errorf("no progress on stderr: %s", r.stderr)
	}

	r = runProcess(t, env, "bench", "--scenario", "drain", "--jobs", "2000", "--json")
	if r.code != 0 {
		t.Fatalf("bench drain: %+v", r)
	}
	doc = benchDoc{}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("bench drain: stdout is not one JSON document: %v\n%s", err, r.stdout)
	}
	if strings.Join(doc.Scenarios, ",") != "bound,drain" || doc.Bound == nil || doc.Drain == nil {
		t.Fatalf("drain runs the bound first: %s", r.stdout)
	}
	if d := doc.Drain; d.Rate.Jobs != 2000 || d.Rate.JobsPerSec <= 0 || d.Rate.VsBound <= 0 || d.VsDurable <= 0 || d.Failed != 0 || d.Processes < 1 {
		t.Fatalf("drain figures: %s", r.stdout)
	}
	for _, table := range []string{"queue_jobs", "queue_failed_jobs", "fleet_jobs"} {
		if n := countJobs(t, url, table); n != 0 {
			t.Errorf("%d rows left in %s", n, table)
		}
	}

	// One round of the paths: one fleet:work at 1000 and at 64, and a
	// master of 2 × 500, each draining its own 500 jobs.
	r = runProcess(t, env, "bench", "--scenario", "paths", "--jobs", "500", "--rounds", "1", "--json")
	if r.code != 0 {
		t.Fatalf("bench paths: %+v", r)
	}
	doc = benchDoc{}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("bench paths: stdout is not one JSON document: %v\n%s", err, r.stdout)
	}
	if p := doc.Paths; p == nil || p.Rounds != 1 || len(p.High.JobsPerSec) != 1 || p.High.Median <= 0 ||
		p.LowVsHigh <= 0 || p.MasterVsOne <= 0 || p.MasterVsDurable <= 0 {
		t.Fatalf("paths figures: %s", r.stdout)
	}
	for _, table := range []string{"queue_jobs", "queue_failed_jobs", "fleet_jobs"} {
		if n := countJobs(t, url, table); n != 0 {
			t.Errorf("%d rows left in %s after the paths", n, table)
		}
	}
}

func TestBenchRefusesForeignJobs(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	if r := run(t, dir, env, "dispatch", "--name", "demo.noop", "--count", "3"); r.code != 0 {
		t.Fatalf("dispatch: %+v", r)
	}
	r := run(t, dir, env, "bench", "--scenario", "bound", "--jobs", "1000")
	if r.code == 0 || !strings.Contains(r.stderr, "holds 3 job(s)") || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("bench on a database with other jobs: %+v", r)
	}
	if n := countJobs(t, url, "queue_jobs"); n != 3 {
		t.Fatalf("%d jobs in queue_jobs, want the 3 others untouched", n)
	}
	r = run(t, dir, env, "bench", "--scenario", "bound", "--jobs", "1000", "--force", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"reference_jobs_per_sec"`) {
		t.Fatalf("bench --force: %+v", r)
	}
	if n := countJobs(t, url, "queue_jobs"); n != 3 {
		t.Fatalf("%d jobs in queue_jobs after bench --force, want the 3 others only", n)
	}
}

// TestBenchHandlerOnlyWhereTheBenchRuns: the bench's no-op handler is in
// no application's normal registry, so a plain fleet:work fails a job of
// that name; a fleet:work the bench started (bench.EnvRun in its
// environment) has it and runs the job, and so does the bench's own
// process. (TestBenchBoundAndDrain drains through real children of a
// real bench, which stalls without it.)
func TestBenchHandlerOnlyWhereTheBenchRuns(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	const q = bench.Prefix + "registration"
	execute := func(env []string, args ...string) (*queue.Registry, result) {
		t.Helper()
		jobs := appJobs()
		var out, errb bytes.Buffer
		code := cmd.ExecuteContext(context.Background(), cmd.App{
			Jobs: jobs, Args: args, Environ: env, Dir: dir, Stdout: &out, Stderr: &errb,
		})
		return jobs, result{code, out.String(), errb.String()}
	}
	has := func(jobs *queue.Registry) bool {
		_, ok := jobs.Lookup(bench.JobName)
		return ok
	}
	dispatch := func() {
		t.Helper()
		if r := run(t, dir, env, "dispatch", "--name", bench.JobName, "--queue", q, "--tries", "1"); r.code != 0 {
			t.Fatalf("dispatch: %+v", r)
		}
	}

	if jobs, r := execute(env, "version"); r.code != 0 || has(jobs) {
		t.Fatalf("app version: registry has %s: %v (%+v)", bench.JobName, has(jobs), r)
	}

	dispatch()
	jobs, r := execute(env, "fleet:work", "--queue", q, "--stop-when-empty")
	if r.code != 0 {
		t.Fatalf("fleet:work: %+v", r)
	}
	if has(jobs) {
		t.Errorf("a plain fleet:work registered %s", bench.JobName)
	}
	if n := countJobs(t, url, "queue_failed_jobs"); n != 1 {
		t.Fatalf("%d failed jobs after a plain fleet:work, want its job of %s failed (no handler)", n, bench.JobName)
	}

	dispatch()
	jobs, r = execute(append(slices.Clone(env), bench.EnvRun+"=test-run"), "fleet:work", "--queue", q, "--stop-when-empty")
	if r.code != 0 {
		t.Fatalf("fleet:work of a bench: %+v", r)
	}
	if !has(jobs) {
		t.Errorf("a fleet:work with %s set has no %s", bench.EnvRun, bench.JobName)
	}
	if n := countJobs(t, url, "queue_jobs"); n != 0 {
		t.Errorf("%d jobs left after a bench's fleet:work, want its job run", n)
	}
	if n := countJobs(t, url, "queue_failed_jobs"); n != 1 {
		t.Errorf("%d failed jobs after a bench's fleet:work, want the first one only", n)
	}

	jobs, r = execute(env, "bench", "--scenario", "bound", "--jobs", "100", "--json")
	if r.code != 0 {
		t.Fatalf("bench: %+v", r)
	}
	if !has(jobs) {
		t.Errorf("the bench's own process has no %s", bench.JobName)
	}
}
