package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

const (
	// benchPrefix starts the name of every queue the bench uses; it refuses
	// a database holding jobs of other queues and deletes everything of its
	// own queues before and after a run.
	benchPrefix = "bench-"
	// benchJob is the no-op handler the bench's jobs run. Execute registers
	// it in every app's registry (unless the app has one of that name), so
	// the fleet:work children of any app can run it.
	benchJob = "fleet.bench.noop"
)

// benchScenarios are the scenarios in the order "all" runs them.
var benchScenarios = []string{"bound", "drain", "latency", "dispatch", "idle", "backlog", "scale"}

// registerBenchJobs adds the bench's handler to jobs unless it has one.
func registerBenchJobs(jobs *queue.Registry) {
	if _, ok := jobs.Lookup(benchJob); !ok {
		jobs.Handle(benchJob, func(context.Context, *queue.Job) error { return nil })
	}
}

type benchFlags struct {
	scenario      string
	jobs          int
	backlog       int
	sustain       time.Duration
	idleSecs      int
	cellSecs      int
	samples       int
	scaleBacklogs string
	scaleConc     string
	json          bool
	force         bool
}

func (r *runner) benchCommand() *cobra.Command {
	var f benchFlags
	c := &cobra.Command{
		Use:   "bench [--scenario bound|drain|latency|dispatch|idle|backlog|scale|all] [--jobs N] [--json]",
		Short: "Measure throughput and latency of this app's fleet on the configured database",
		Long: "Runs benchmark scenarios on the configured database (database.url) with the real master " +
			"and real fleet:work children of this executable, and prints a table (or, with --json, one " +
			"JSON document) on stdout; progress goes to stderr once a second.\n\n" +
			"Every throughput is also given as a ratio to the bound: a raw SQL loop in this process " +
			"(4 connections, lock a batch with FOR UPDATE SKIP LOCKED, delete it, commit) on the same " +
			"database, measured first in the same run (batch 1000 is the reference).\n\n" +
			"Scenarios: bound (the reference, batch 100 and 1000); drain (--jobs no-op jobs through a " +
			"master with one supervisor, 2 processes × 64); latency (one job at a time into an idle " +
			"fleet: dispatch to handler start, dispatch to outcome written); dispatch (Dispatch from 1 " +
			"and 16 goroutines, DispatchMany in batches of 1000 and one large batch); idle (a master " +
			"process with 10 supervisors of 5 queues each, nothing to do, for --idle-secs: CPU, peak RSS, " +
			"transactions per second); backlog (--backlog pending jobs: a claim, Workload and " +
			"/metrics latency, then a drain for --sustain while jobs are dispatched at 80 % of the " +
			"measured drain rate); scale (drain rate of one fleet:work process per backlog size × " +
			"concurrency); all (every scenario in that order, one bound).\n\n" +
			"The bench migrates nothing: run 'app migrate' first. It uses only queues named " + benchPrefix +
			"*, refuses a database holding jobs of any other queue unless --force, and deletes its " +
			"queues' jobs, failed jobs, history, counters and snapshots before and after (also after " +
			"Ctrl-C). Its jobs run the handler " + benchJob + ", which every app gets. Use a database of " +
			"its own: the bench loads it heavily.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return r.bench(c, f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.scenario, "scenario", "all", "bound, drain, latency, dispatch, idle, backlog, scale or all")
	fl.IntVar(&f.jobs, "jobs", 200000, "jobs for bound, drain and dispatch")
	fl.IntVar(&f.backlog, "backlog", 1000000, "pending jobs for the backlog scenario")
	fl.DurationVar(&f.sustain, "sustain", 0, "sustained drain of the backlog scenario (default 10m, 2m under --scenario all)")
	fl.IntVar(&f.idleSecs, "idle-secs", 60, "seconds the idle scenario measures")
	fl.IntVar(&f.cellSecs, "cell-secs", 15, "seconds per scale cell, the backlog kept topped up (0: drain each cell fully)")
	fl.IntVar(&f.samples, "samples", 200, "jobs the latency scenario times")
	fl.StringVar(&f.scaleBacklogs, "scale-backlogs", "10000,100000,1000000", "backlog sizes of the scale grid")
	fl.StringVar(&f.scaleConc, "scale-concurrency", "1,16,64,256,1000", "concurrencies of the scale grid")
	fl.BoolVar(&f.json, "json", false, "print one JSON document instead of the table")
	fl.BoolVar(&f.force, "force", false, "run on a database that holds jobs of other queues")
	return c
}

// bench is one run of "app bench".
type bench struct {
	r      *runner
	cfg    *config.Config
	f      benchFlags
	url    string
	db     database
	pool   *pgxpool.Pool
	st     *store.Store
	client *queue.Client
	stderr io.Writer
	log    *slog.Logger

	rep  benchReport
	rows []benchRow
	ref  float64 // the bound's jobs/s at batch 1000; 0 until measured
}

// benchReport is the JSON document.
type benchReport struct {
	Database  string                   `json:"database"`
	StartedAt time.Time                `json:"started_at"`
	CPUs      int                      `json:"cpus"`
	Scenarios []string                 `json:"scenarios"`
	Bound     *boundResult             `json:"bound,omitempty"`
	Drain     *drainResult             `json:"drain,omitempty"`
	Latency   *latencyResult           `json:"latency,omitempty"`
	Dispatch  *dispatchResult          `json:"dispatch,omitempty"`
	Idle      *idleResult              `json:"idle,omitempty"`
	Backlog   *backlogResult           `json:"backlog,omitempty"`
	Scale     *scaleResult             `json:"scale,omitempty"`
	Cleanup   store.BenchCleanupResult `json:"cleanup"`
}

// benchRate is a throughput and its ratio to the bound (batch 1000) of the
// same run.
type benchRate struct {
	Jobs       int64   `json:"jobs"`
	Secs       float64 `json:"secs"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	VsBound    float64 `json:"vs_bound"`
}

// benchRow is a line of the table.
type benchRow struct {
	scenario, measure, value, vsBound, note string
}

func (b *bench) rate(jobs int64, d time.Duration) benchRate {
	r := benchRate{Jobs: jobs, Secs: round(d.Seconds(), 3)}
	if d > 0 {
		r.JobsPerSec = round(float64(jobs)/d.Seconds(), 1)
	}
	if b.ref > 0 {
		r.VsBound = round(r.JobsPerSec/b.ref, 3)
	}
	return r
}

// addRate adds a throughput row.
func (b *bench) addRate(scenario, measure string, r benchRate, note string) {
	vs := "-"
	if b.ref > 0 {
		vs = fmt.Sprintf("%.3f×", r.VsBound)
	}
	b.rows = append(b.rows, benchRow{scenario, measure, fmt.Sprintf("%.0f jobs/s", r.JobsPerSec), vs, note})
}

// addRow adds a row that is no throughput.
func (b *bench) addRow(scenario, measure, value, note string) {
	b.rows = append(b.rows, benchRow{scenario, measure, value, "", note})
}

func round(x float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	return float64(int64(x*p+0.5)) / p
}

func (r *runner) bench(c *cobra.Command, f benchFlags) error {
	scenarios, err := benchPlan(&f, c.Flags().Changed("sustain"))
	if err != nil {
		return err
	}
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	db, err := databaseOf(cfg)
	if err != nil {
		return err
	}
	url := db.url
	ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The master and the sixteen dispatching goroutines share the pool.
	pool, err := openPool(ctx, db, max(cfg.Database.MaxConns, 24), "fleet bench")
	if err != nil {
		return err
	}
	defer pool.Close()
	// The bench's own master logs warnings only, so progress stays legible.
	bcfg := *cfg
	if lvl := strings.ToLower(bcfg.Log.Level); lvl == "" || lvl == "info" || lvl == "debug" {
		bcfg.Log.Level = "warn"
	}
	b := &bench{
		r: r, cfg: &bcfg, f: f, url: url, db: db, pool: pool, st: store.New(pool),
		client: queue.NewClient(pool, queue.Defaults{}), stderr: c.ErrOrStderr(),
		rep: benchReport{Database: config.RedactURL(url), StartedAt: time.Now().UTC().Truncate(time.Second),
			CPUs: runtime.NumCPU(), Scenarios: scenarios},
	}
	b.log = r.logger(b.cfg)
	if err := b.check(ctx); err != nil {
		return err
	}
	if err := b.cleanup(ctx, "leftovers of an earlier run"); err != nil {
		return err
	}
	runErr := b.run(ctx, scenarios)
	// Clean up even after Ctrl-C: the children have stopped by now.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	if err := b.cleanup(cctx, "the bench's jobs"); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if runErr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("bench interrupted; its jobs are cleaned up: %w", ctx.Err())
		}
		return runErr
	}
	return b.print(c.OutOrStdout())
}

// benchPlan checks the flags and returns the scenarios to run, the bound
// first whenever another needs it.
func benchPlan(f *benchFlags, sustainSet bool) ([]string, error) {
	var want []string
	switch {
	case f.scenario == "all":
		want = slices.Clone(benchScenarios)
		if !sustainSet {
			f.sustain = 2 * time.Minute
		}
	case slices.Contains(benchScenarios, f.scenario):
		want = []string{f.scenario}
		if slices.Contains([]string{"drain", "dispatch", "backlog", "scale"}, f.scenario) {
			want = []string{"bound", f.scenario}
		}
	default:
		return nil, fmt.Errorf("--scenario %q: want one of %s or all", f.scenario, strings.Join(benchScenarios, ", "))
	}
	if !sustainSet && f.scenario != "all" {
		f.sustain = 10 * time.Minute
	}
	switch {
	case f.jobs < 100:
		return nil, fmt.Errorf("--jobs must be at least 100, got %d", f.jobs)
	case f.backlog < 1000:
		return nil, fmt.Errorf("--backlog must be at least 1000, got %d", f.backlog)
	case f.sustain < 10*time.Second:
		return nil, fmt.Errorf("--sustain must be at least 10s, got %s", f.sustain)
	case f.idleSecs < 1 || f.cellSecs < 0 || f.samples < 1:
		return nil, errors.New("--idle-secs and --samples must be at least 1, --cell-secs at least 0")
	}
	if _, err := parseInts("--scale-backlogs", f.scaleBacklogs); err != nil {
		return nil, err
	}
	if _, err := parseInts("--scale-concurrency", f.scaleConc); err != nil {
		return nil, err
	}
	return want, nil
}

func parseInts(flag, s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s %q: want positive whole numbers, comma-separated", flag, s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s must list at least one number", flag)
	}
	return out, nil
}

// check refuses a database that is not migrated or holds other jobs.
func (b *bench) check(ctx context.Context) error {
	missing, err := b.st.BenchTablesMissing(ctx)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("database %s is not migrated (no table %s): run 'app migrate' first", b.rep.Database, strings.Join(missing, ", "))
	}
	n, err := b.st.BenchForeignJobs(ctx, benchPrefix)
	if err != nil {
		return err
	}
	if n > 0 && !b.f.force {
		return fmt.Errorf("database %s holds %d job(s) the bench did not create (queues not named %s*): "+
			"run the bench on a database of its own, or pass --force to run it anyway (it touches only %s* queues)",
			b.rep.Database, n, benchPrefix, benchPrefix)
	}
	if n > 0 {
		b.progressf("--force: running beside %d job(s) of other queues; the figures include their load", n)
	}
	return nil
}

func (b *bench) cleanup(ctx context.Context, what string) error {
	res, err := b.st.BenchCleanup(ctx, benchPrefix)
	if err != nil {
		return err
	}
	b.rep.Cleanup.Jobs += res.Jobs
	b.rep.Cleanup.FailedJobs += res.FailedJobs
	b.rep.Cleanup.History += res.History
	if res.Jobs+res.FailedJobs+res.History > 0 {
		b.progressf("cleaned up %s: %d queued, %d failed jobs, %d history rows", what, res.Jobs, res.FailedJobs, res.History)
	}
	return nil
}

func (b *bench) run(ctx context.Context, scenarios []string) error {
	run := map[string]func(context.Context) error{
		"bound": b.bound, "drain": b.drain, "latency": b.latency, "dispatch": b.dispatch,
		"idle": b.idle, "backlog": b.backlog, "scale": b.scale,
	}
	for _, s := range scenarios {
		b.progressf("== %s", s)
		if err := run[s](ctx); err != nil {
			return fmt.Errorf("scenario %s: %w", s, err)
		}
		// Each scenario starts on empty bench queues.
		if err := b.cleanup(ctx, "after "+s); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) progressf(format string, args ...any) {
	fmt.Fprintf(b.stderr, "bench: "+format+"\n", args...)
}

// progress prints, once a second until stop is called, how far a scenario
// is: done of total and the rate over the last second. done is read on the
// progress goroutine.
func (b *bench) progress(ctx context.Context, label string, total int64, done func(context.Context) (int64, error)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		start, last, lastAt := time.Now(), int64(0), time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				n, err := done(ctx)
				if err != nil {
					if ctx.Err() == nil {
						b.progressf("%s: %v", label, err)
					}
					continue
				}
				r := float64(n-last) / now.Sub(lastAt).Seconds()
				last, lastAt = n, now
				if total > 0 {
					b.progressf("%s  %d/%d  %.0f/s  %s", label, n, total, r, now.Sub(start).Round(time.Second))
				} else {
					b.progressf("%s  %d  %.0f/s  %s", label, n, r, now.Sub(start).Round(time.Second))
				}
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// print writes the table or the JSON document.
func (b *bench) print(out io.Writer) error {
	if b.f.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(b.rep); err != nil {
			return fmt.Errorf("write the report: %w", err)
		}
		return nil
	}
	fmt.Fprintf(out, "fleet bench on %s, %d CPUs, %s\n", b.rep.Database, b.rep.CPUs, b.rep.StartedAt.Format(time.RFC3339))
	if b.ref > 0 {
		fmt.Fprintf(out, "vs bound: ratio to the raw SQL loop at batch 1000 (%.0f jobs/s) of this run\n\n", b.ref)
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMEASURE\tVALUE\tVS BOUND\tNOTE")
	for _, r := range b.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.scenario, r.measure, r.value, r.vsBound, r.note)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	if b.rep.Scale != nil {
		fmt.Fprintln(out, "\nscale: drain rate of one fleet:work process")
		tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
		for _, line := range b.rep.Scale.Grid[:len(b.rep.Scale.Grid)-1] {
			fmt.Fprintln(tw, line+"\t")
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("write the report: %w", err)
		}
		fmt.Fprintln(out, b.rep.Scale.Grid[len(b.rep.Scale.Grid)-1])
	}
	return nil
}

// childEnv is the environment of the processes the bench starts itself:
// the app's, the bench's database, and the configuration file when one was
// given.
func (b *bench) childEnv(extra ...string) ([]string, error) {
	env := slices.Clone(b.r.app.Environ)
	env = append(env, "APP_DATABASE__URL="+b.url, "APP_DATABASE__POOLER="+b.db.pooler,
		"APP_DATABASE__DIRECT_URL="+b.db.directURL, "APP_LOG__LEVEL="+b.cfg.Log.Level)
	if b.r.configPath != "" {
		abs := b.r.configPath
		if !filepath.IsAbs(abs) {
			var err error
			if abs, err = filepath.Abs(filepath.Join(b.r.app.Dir, abs)); err != nil {
				return nil, fmt.Errorf("--config %s: %w", b.r.configPath, err)
			}
		}
		env = append(env, "APP_CONFIG="+abs)
	}
	return append(env, extra...), nil
}
