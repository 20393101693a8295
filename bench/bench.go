// Package bench is "app bench": the load-testing scenarios (bound, drain,
// paths, held, cold, masters, latency, dispatch, idle, backlog, scale,
// peers, payload), the raw SQL loop every throughput is compared with, the
// statements that fill, measure and clean the bench's own queues, and the
// report it prints. It holds no cobra and does not import cmd: the
// application's command parses the flags into a Plan and hands Run what
// only it knows (Options): the configuration, the pool, how its master is
// built, where its executable and environment are.
//
// The bench's jobs run the no-op handler JobName. It is registered only
// where a bench runs: in the bench's own process, and in the processes the
// bench starts (a master, fleet:work), which it marks with EnvRun in their
// environment; an application's command reads that variable and calls
// Register before it starts anything.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

const (
	// Prefix starts the name of every queue the bench uses; it refuses a
	// database holding jobs of other queues and deletes everything of its
	// own queues before and after a run.
	Prefix = "bench-"
	// JobName is the no-op handler the bench's jobs run (see Register).
	JobName = "fleet.bench.noop"
	// EnvRun names the environment variable that marks a process a bench
	// started (its value names the run): such a process registers JobName
	// (see Register), so the fleet:work children of any app can run the
	// bench's jobs while no application's normal registry has it.
	EnvRun = "FLEET_BENCH_RUN"
	// StampJobName is the latency scenario's handler (see RegisterStamp):
	// it notes when it starts, on the clock of the process it runs in.
	StampJobName = "fleet.bench.stamp"
	// EnvStamps names the variable that gives a process the bench started
	// the file its StampJobName handler appends to.
	EnvStamps = "FLEET_BENCH_STAMPS"
)

// benchScenarios are the scenarios in the order "all" runs them.
var benchScenarios = []string{"bound", "drain", "paths", "held", "cold", "masters", "prefetch", "latency", "dispatch", "idle", "backlog", "scale"}

// onlyByName are the scenarios "all" leaves out: they run only when
// named. peers compares fleet with other queues that the bench does not
// ship (see bench/peers/install.sh); payload writes gigabytes of payloads
// for each size.
var onlyByName = []string{"peers", "payload"}

// Register adds the bench's no-op handler, its sleeping one
// (SleepJobName) and the payload scenario's (PayloadJobName) to jobs unless
// it has handlers of those names. Call it only in a process that runs the
// bench or that the bench started (EnvRun set).
func Register(jobs *queue.Registry) {
	if _, ok := jobs.Lookup(JobName); !ok {
		jobs.Handle(JobName, func(context.Context, *queue.Job) error { return nil })
	}
	if _, ok := jobs.Lookup(SleepJobName); !ok {
		jobs.Handle(SleepJobName, sleepJob)
	}
	if _, ok := jobs.Lookup(PayloadJobName); !ok {
		jobs.Handle(PayloadJobName, handlePayload)
	}
}

// RegisterStamp adds, unless jobs has one of that name, the handler
// StampJobName: it appends "ID UNIX_NANOS" (the job's id, the time it
// started on this host's clock) to the file path, or does nothing when path
// is empty. The bench's latency scenario reads the file, on the same host,
// so that a handler's start is timed on one clock with no estimate between
// (fleet_jobs.started_at is on the database's clock, through an offset
// measured within half a claim's round trip). Call it where Register is
// called, with the value of EnvStamps.
func RegisterStamp(jobs *queue.Registry, path string) {
	if _, ok := jobs.Lookup(StampJobName); ok {
		return
	}
	jobs.Handle(StampJobName, func(_ context.Context, job *queue.Job) error {
		at := time.Now()
		if path == "" {
			return nil
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("bench stamp: %w", err)
		}
		_, err = fmt.Fprintf(f, "%d %d\n", job.ID, at.UnixNano())
		return errors.Join(err, f.Close())
	})
}

// Flags are the options of "app bench", as its command line gives them.
type Flags struct {
	// Scenario is bound, drain, paths, held, cold, masters, prefetch,
	// latency, dispatch, idle, backlog, scale, peers, payload or all.
	Scenario string
	// Jobs is the job count of bound, drain, paths, held, cold, masters,
	// dispatch and peers.
	Jobs int
	// Backlog is the pending jobs of the backlog scenario.
	Backlog int
	// Sustain is the sustained drain of the backlog scenario; when
	// SustainSet is false it is 10 minutes, 2 under "all".
	Sustain    time.Duration
	SustainSet bool
	// IdleSecs is how long the idle scenario measures.
	IdleSecs int
	// CellSecs is the length of a scale cell (0: drain each fully).
	CellSecs int
	// Samples is the jobs the latency scenario times.
	Samples int
	// Rounds is how many times the paths, cold, masters and peers
	// scenarios drain each path, the held scenario drains without and
	// with a held transaction, and the prefetch scenario runs each of its
	// settings.
	Rounds int
	// PeersDir is where the peers scenario finds the peers that
	// bench/peers/install.sh installs (default DefaultPeersDir), relative
	// to Options.Dir unless absolute.
	PeersDir string
	// ScaleBacklogs and ScaleConcurrency list the scale grid's backlogs
	// and concurrencies, comma-separated.
	ScaleBacklogs    string
	ScaleConcurrency string
	// Masters lists the numbers of masters the masters scenario compares,
	// comma-separated, the first being the reference (default 1,2,4,8).
	Masters string
	// PayloadSizes lists the payload scenario's payload sizes in KiB,
	// comma-separated (default DefaultPayloadSizes); PayloadMB is the MiB
	// of payloads it dispatches and drains for each size, PayloadConc the
	// draining worker's concurrency.
	PayloadSizes string
	PayloadMB    int
	PayloadConc  int
	// JSON prints one JSON document instead of the table.
	JSON bool
	// Force runs on a database holding jobs of other queues.
	Force bool
}

// Plan is a checked set of Flags and the scenarios they run.
type Plan struct {
	f         Flags
	scenarios []string
}

// NewPlan checks f and returns the scenarios to run, the bound first
// whenever another needs it.
func NewPlan(f Flags) (Plan, error) {
	scenarios, err := benchPlan(&f)
	if err != nil {
		return Plan{}, err
	}
	return Plan{f: f, scenarios: scenarios}, nil
}

// Scenarios are the scenarios the plan runs, in order.
func (p Plan) Scenarios() []string { return slices.Clone(p.scenarios) }

// NewMasterFunc builds the master "app fleet" would build from cfg, over
// sups, on st, starting its workers with sp.
type NewMasterFunc func(cfg *config.Config, sups []supervisor.Supervisor, st *store.Store, sp spawner.Spawner) (*master.Master, error)

// Options are what Run needs from the application that runs the bench.
type Options struct {
	// Config is the application's configuration. The bench runs its
	// masters and workers with it, logging warnings only unless it asks
	// for less.
	Config *config.Config
	// URL is the database's URL (database.url), handed to the processes
	// the bench starts and shown redacted in the report.
	URL string
	// Pooler and DirectURL are database.pooler and database.direct_url,
	// handed to the processes the bench starts with URL.
	Pooler, DirectURL string
	// Pool is a pool on URL with room for the master and sixteen
	// dispatching goroutines (24 connections). Run does not close it.
	Pool *pgxpool.Pool
	// NewMaster builds a master as "app fleet" does.
	NewMaster NewMasterFunc
	// Logger builds the application's logger for a configuration.
	Logger func(*config.Config) *slog.Logger
	// Executable is the application's program, started as "fleet" and
	// "fleet:work" (default: the running executable).
	Executable string
	// Dir is the working directory of the processes the bench starts.
	Dir string
	// Environ is the application's environment; the processes the bench
	// starts get it, the database URL, the log level, APP_CONFIG when
	// ConfigPath is set, and EnvRun.
	Environ []string
	// ConfigPath is the --config file, relative to Dir unless absolute;
	// empty when none was given.
	ConfigPath string
	// Stdout receives the table or the JSON document, Stderr the progress
	// and the children's output.
	Stdout, Stderr io.Writer
}

// bench is one run of "app bench".
type bench struct {
	opts   Options
	cfg    *config.Config
	f      Flags
	url    string
	exe    string
	runID  string
	db     db
	st     *store.Store
	client *queue.Client
	stderr io.Writer
	log    *slog.Logger

	rep  benchReport
	rows []benchRow
	ref  float64 // the bound's jobs/s at batch 1000; 0 until measured
	// durable is the durable bound's jobs/s; 0 until measured.
	durable float64
	// stamps is the file the processes the bench starts note their
	// StampJobName starts in (see RegisterStamp); empty: none.
	stamps string
}

// benchReport is the JSON document.
type benchReport struct {
	Database  string          `json:"database"`
	StartedAt time.Time       `json:"started_at"`
	CPUs      int             `json:"cpus"`
	Scenarios []string        `json:"scenarios"`
	Bound     *boundResult    `json:"bound,omitempty"`
	Drain     *drainResult    `json:"drain,omitempty"`
	Paths     *pathsResult    `json:"paths,omitempty"`
	Held      *heldResult     `json:"held,omitempty"`
	Cold      *coldResult     `json:"cold,omitempty"`
	Masters   *mastersResult  `json:"masters,omitempty"`
	Prefetch  *prefetchResult `json:"prefetch,omitempty"`
	Latency   *latencyResult  `json:"latency,omitempty"`
	Dispatch  *dispatchResult `json:"dispatch,omitempty"`
	Idle      *idleResult     `json:"idle,omitempty"`
	Backlog   *backlogResult  `json:"backlog,omitempty"`
	Scale     *scaleResult    `json:"scale,omitempty"`
	Peers     *peersResult    `json:"peers,omitempty"`
	Payload   *payloadResult  `json:"payload,omitempty"`
	Cleanup   cleanupResult   `json:"cleanup"`
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
	return b.withBound(r)
}

// withBound sets r's ratio to the bound, once the bound is measured.
func (b *bench) withBound(r benchRate) benchRate {
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

// Run runs plan's scenarios on opts.Pool's database and prints the table
// or the JSON document on opts.Stdout. The bench's jobs are deleted before
// and after, also when ctx ends first.
func Run(ctx context.Context, plan Plan, opts Options) error {
	if opts.Config == nil || opts.Pool == nil || opts.NewMaster == nil || opts.Logger == nil {
		return errors.New("bench: Options need Config, Pool, NewMaster and Logger")
	}
	exe := opts.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("find the running executable: %w", err)
		}
	}
	stderr := opts.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	// The bench's own master logs warnings only, so progress stays legible.
	bcfg := *opts.Config
	if lvl := strings.ToLower(bcfg.Log.Level); lvl == "" || lvl == "info" || lvl == "debug" {
		bcfg.Log.Level = "warn"
	}
	started := time.Now().UTC().Truncate(time.Second)
	b := &bench{
		opts: opts, cfg: &bcfg, f: plan.f, url: opts.URL, exe: exe,
		runID: fmt.Sprintf("%d-%s", os.Getpid(), started.Format("20060102T150405Z")),
		db:    db{pool: opts.Pool}, st: store.New(opts.Pool),
		client: queue.NewClient(opts.Pool, queue.Defaults{}), stderr: stderr,
		rep: benchReport{Database: config.RedactURL(opts.URL), StartedAt: started,
			CPUs: runtime.NumCPU(), Scenarios: plan.Scenarios()},
	}
	b.log = opts.Logger(b.cfg)
	if err := b.check(ctx); err != nil {
		return err
	}
	if err := b.cleanup(ctx, "leftovers of an earlier run"); err != nil {
		return err
	}
	runErr := b.run(ctx, plan.scenarios)
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
	out := opts.Stdout
	if out == nil {
		out = io.Discard
	}
	return b.print(out)
}

// benchPlan checks the flags and returns the scenarios to run, the bound
// first whenever another needs it.
func benchPlan(f *Flags) ([]string, error) {
	var want []string
	switch {
	case f.Scenario == "all":
		want = slices.Clone(benchScenarios)
		if !f.SustainSet {
			f.Sustain = 2 * time.Minute
		}
	case slices.Contains(benchScenarios, f.Scenario) || slices.Contains(onlyByName, f.Scenario):
		want = []string{f.Scenario}
		if slices.Contains([]string{"drain", "paths", "held", "dispatch", "backlog", "scale"}, f.Scenario) {
			want = []string{"bound", f.Scenario}
		}
	default:
		return nil, fmt.Errorf("--scenario %q: want one of %s or all", f.Scenario, strings.Join(append(slices.Clone(benchScenarios), onlyByName...), ", "))
	}
	if !f.SustainSet && f.Scenario != "all" {
		f.Sustain = 10 * time.Minute
	}
	switch {
	case f.Jobs < 100:
		return nil, fmt.Errorf("--jobs must be at least 100, got %d", f.Jobs)
	case f.Backlog < 1000:
		return nil, fmt.Errorf("--backlog must be at least 1000, got %d", f.Backlog)
	case f.Sustain < 10*time.Second:
		return nil, fmt.Errorf("--sustain must be at least 10s, got %s", f.Sustain)
	case f.IdleSecs < 1 || f.CellSecs < 0 || f.Samples < 1:
		return nil, errors.New("--idle-secs and --samples must be at least 1, --cell-secs at least 0")
	case f.Rounds < 1:
		return nil, fmt.Errorf("--rounds must be at least 1, got %d", f.Rounds)
	}
	if _, err := parseInts("--scale-backlogs", f.ScaleBacklogs); err != nil {
		return nil, err
	}
	if _, err := parseInts("--scale-concurrency", f.ScaleConcurrency); err != nil {
		return nil, err
	}
	if _, err := mastersList(f.Masters); err != nil {
		return nil, err
	}
	if _, err := payloadSizes(f.PayloadSizes); err != nil {
		return nil, err
	}
	if f.PayloadMB < 1 || f.PayloadConc < 1 {
		return nil, fmt.Errorf("--payload-mb and --payload-concurrency must be at least 1, got %d and %d", f.PayloadMB, f.PayloadConc)
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

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// check refuses a database that is not migrated or holds other jobs.
func (b *bench) check(ctx context.Context) error {
	missing, err := b.db.tablesMissing(ctx)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("database %s is not migrated (no table %s): run 'app migrate' first", b.rep.Database, strings.Join(missing, ", "))
	}
	n, err := b.db.foreignJobs(ctx, Prefix)
	if err != nil {
		return err
	}
	if n > 0 && !b.f.Force {
		return fmt.Errorf("database %s holds %d job(s) the bench did not create (queues not named %s*): "+
			"run the bench on a database of its own, or pass --force to run it anyway (it touches only %s* queues)",
			b.rep.Database, n, Prefix, Prefix)
	}
	if n > 0 {
		b.progressf("--force: running beside %d job(s) of other queues; the figures include their load", n)
	}
	return nil
}

func (b *bench) cleanup(ctx context.Context, what string) error {
	res, err := b.db.cleanup(ctx, Prefix)
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
		"idle": b.idle, "backlog": b.backlog, "scale": b.scale, "paths": b.paths, "held": b.held,
		"peers": b.peers, "cold": b.cold, "masters": b.masters, "prefetch": b.prefetch, "payload": b.payload,
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
	if b.f.JSON {
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
// the app's, the bench's database, the configuration file when one was
// given, and the mark of this run (EnvRun), which makes them register the
// bench's handler.
func (b *bench) childEnv(extra ...string) ([]string, error) {
	env := slices.Clone(b.opts.Environ)
	env = append(env, "APP_DATABASE__URL="+b.url, "APP_DATABASE__POOLER="+b.opts.Pooler,
		"APP_DATABASE__DIRECT_URL="+b.opts.DirectURL, "APP_LOG__LEVEL="+b.cfg.Log.Level)
	if b.opts.ConfigPath != "" {
		abs := b.opts.ConfigPath
		if !filepath.IsAbs(abs) {
			var err error
			if abs, err = filepath.Abs(filepath.Join(b.opts.Dir, abs)); err != nil {
				return nil, fmt.Errorf("--config %s: %w", b.opts.ConfigPath, err)
			}
		}
		env = append(env, "APP_CONFIG="+abs)
	}
	env = append(env, EnvRun+"="+b.runID)
	if b.stamps != "" {
		env = append(env, EnvStamps+"="+b.stamps)
	}
	return append(env, extra...), nil
}
