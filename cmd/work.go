package cmd

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
	"github.com/fleet-go/fleet/worker"
)

type workFlags struct {
	queues        string
	supervisor    string
	master        string
	masterTTL     time.Duration
	workerName    string
	paused        bool
	pausedQueues  string
	tries         int
	backoff       string
	timeout       time.Duration
	concurrency   int
	maxJobs       int
	maxTimeSecs   int
	maxMemoryMB   int
	maxConns      int
	stopWhenEmpty bool
	reports       bool
}

func (r *runner) workCommand() *cobra.Command {
	f := new(workFlags)
	c := &cobra.Command{
		Use:   "fleet:work [--queue a,b] [--concurrency N]",
		Short: "Run a worker: claim and run jobs from the given queues",
		Long: "Run up to --concurrency jobs at once from the listed queues, in priority order. " +
			"At a limit, on SIGTERM/SIGINT, or with --stop-when-empty once idle, it takes no new jobs, " +
			"finishes the running ones and exits 0. A fleet master starts these itself.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return r.work(c, *f) },
	}
	f.register(c)
	return c
}

// register defines the flags of fleet:work on c, to be read into f.
func (f *workFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.queues, "queue", "", "queues in priority order, comma-separated (default queue.queues)")
	fl.IntVar(&f.concurrency, "concurrency", 0, "jobs run at once (default queue.workers)")
	fl.IntVar(&f.maxJobs, "max-jobs", 0, "exit after starting N jobs (0: never)")
	fl.IntVar(&f.maxTimeSecs, "max-time", 0, "exit after SECS seconds (0: never)")
	fl.IntVar(&f.maxMemoryMB, "max-memory-mb", 0, "exit when resident memory exceeds MB (0: never)")
	fl.IntVar(&f.maxConns, "max-conns", 0, "size of the worker's connection pool, its LISTEN connection aside (default database.max_conns, else 3, or 4 run by hand, which beats a membership row of its own; set by the master)")
	fl.BoolVar(&f.stopWhenEmpty, "stop-when-empty", false, "exit once nothing is running and no job is ready")
	fl.StringVar(&f.supervisor, "supervisor", "", "supervisor this worker belongs to (set by the master)")
	fl.StringVar(&f.master, "master", "", "master this worker belongs to (set by the master); the worker then takes commands on stdin and stops when stdin closes")
	fl.DurationVar(&f.masterTTL, "master-ttl", 0, "the master's row ttl: exit when fenced out that long (set by the master)")
	fl.StringVar(&f.workerName, "worker-name", "", "lease-holder name (default host:pid:random)")
	fl.BoolVar(&f.paused, "paused", false, "start paused: take no jobs until told to continue")
	fl.StringVar(&f.pausedQueues, "paused-queues", "", "queues not to claim from until told otherwise, comma-separated")
	fl.IntVar(&f.tries, "tries", 0, "most attempts for jobs that set none (default queue.tries)")
	fl.StringVar(&f.backoff, "backoff", "", "retry backoff for jobs that set none, e.g. 1,5,30 (default queue.backoff)")
	fl.DurationVar(&f.timeout, "timeout", 0, "timeout for jobs that set none (default queue.timeout_secs)")
	fl.BoolVar(&f.reports, "reports", false, "write @fleet report lines to stdout without --master (for tools that watch a hand-run worker, such as app bench)")
	_ = fl.MarkHidden("reports")
}

// workerGCPercent is the garbage collector's target a fleet:work process
// sets for itself unless GOGC is in its environment. A worker's live heap
// is a few megabytes (its jobs in flight and a batch of outcomes), so the
// default of 100 collects very often under load: with no-op jobs at
// concurrency 1000 the collector took about a third of the process's CPU,
// and 400 cut the process's CPU per job by about a third and raised the
// drain by 10–20 % on a 2-core machine, for a few megabytes more of heap.
const workerGCPercent = 400

// workerGC is the GC percent a fleet:work process with environment
// environ sets, if any: workerGCPercent unless GOGC is set.
func workerGC(environ []string) (int, bool) {
	if _, set := environValue(environ, "GOGC"); set {
		return 0, false
	}
	return workerGCPercent, true
}

func (r *runner) work(c *cobra.Command, f workFlags) error {
	// A master announces the worker's report pipe in the environment. No
	// handler needs to know, and no program a handler starts may inherit
	// it: it leaves the environment before anything else runs.
	announced, piped := environValue(r.app.Environ, spawner.ProtocolFDEnv)
	_ = os.Unsetenv(spawner.ProtocolFDEnv)
	if pct, ok := workerGC(r.app.Environ); ok {
		debug.SetGCPercent(pct)
	}
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	spec, err := f.spec()
	if err != nil {
		return err
	}
	db, err := databaseOf(cfg)
	if err != nil {
		return err
	}
	wcfg := workerConfig(cfg, spec, r.logger(cfg))
	wcfg.StopWhenEmpty = f.stopWhenEmpty
	log := wcfg.Logger
	switch {
	case (f.master != "" || f.reports) && piped:
		// Started by a master: report to it on the pipe it gave us, never on
		// stdout, which is the handlers' (see package spawner).
		pipe, err := spawner.OpenReportPipe(announced)
		if err != nil {
			return err
		}
		defer pipe.Close()
		wcfg.Reports = reportWriter(pipe)
	case f.master != "" || f.reports:
		// Run by hand for a tool that watches it (--reports), or by a master
		// that gives no pipe: report on stdout.
		wcfg.Reports = reportWriter(r.app.Stdout)
	default:
		// Started by hand: a progress line for people instead.
		wcfg.Reports = progressLogger(log, progressEvery, time.Now)
	}
	// The exiting report says whether outcomes were left unwritten, which
	// the exit status says too (ExitUnsaved), so that the master counts the
	// exit by its reason rather than as a crash.
	var unsaved atomic.Int64
	report := wcfg.Reports
	wcfg.Reports = func(rep spawner.Report) {
		if rep.Type == spawner.ReportExiting {
			unsaved.Store(int64(rep.Unsaved))
		}
		report(rep)
	}

	ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// After the first signal a second one gets the default behaviour:
		// the process dies at once.
		<-ctx.Done()
		stop()
	}()

	pcfg := worker.ProcessConfig{
		Worker:    wcfg,
		Version:   versionInfo(r.app.Version).Short(),
		MemberTTL: time.Duration(cfg.Fleet.MasterTTLSecs) * time.Second,
	}
	if f.master != "" {
		// Under a master: commands arrive on stdin from the start, and
		// stdin closing means the master is gone, so stop (finishing
		// running jobs).
		pcfg.Commands = r.app.Stdin
	}
	proc := worker.NewProcess(pcfg)
	appName := "fleet:work " + cmp.Or(f.workerName, hostPID())
	maxConns := cmp.Or(f.maxConns, cfg.Database.MaxConns, supervisor.WorkerConnections-1)
	if f.master == "" && f.maxConns == 0 && cfg.Database.MaxConns == 0 {
		maxConns++ // run by hand, it also beats its own membership row
	}
	var pool *pgxpool.Pool
	connected, err := proc.Connect(ctx, func(ctx context.Context) (err error) {
		pool, err = openPool(ctx, db, maxConns, appName)
		return err
	}, func(err error) bool { return errors.Is(err, errUnreachable) })
	if err != nil {
		return err
	}
	if !connected {
		return nil // stopped while waiting for the database
	}
	defer closePool(pool)
	st, err := db.listenStore(store.New(pool))
	if err != nil {
		return err
	}
	log.Info("database pooler", "pooler", db.pooler, "wake_up", db.wakeups(wcfg.PollInterval))
	_, err = proc.Run(ctx, st, r.app.Jobs)
	switch {
	case errors.Is(err, worker.ErrJobTimedOut):
		return &exitError{code: ExitJobTimedOut, err: err}
	case err != nil && unsaved.Load() > 0:
		return &exitError{code: ExitUnsaved, err: err}
	}
	return err
}

// environValue is the value of key in environ, the last one when it is
// there more than once (as exec does), and whether it is there.
func environValue(environ []string, key string) (string, bool) {
	for i := len(environ) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(environ[i], key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// spec reads the flags that say which worker to run into the shape a
// master starts its workers from: spawner.WorkArgs writes these flags from
// a spec, and this reads them back. What the flags leave unset stays
// zero, for workerConfig to fill from the configuration.
func (f workFlags) spec() (spawner.Spec, error) {
	var queues []string
	if strings.TrimSpace(f.queues) != "" {
		for _, q := range strings.Split(f.queues, ",") {
			q = strings.TrimSpace(q)
			if err := queue.CheckQueue("--queue", q); err != nil {
				return spawner.Spec{}, usagef("%w (a comma-separated list of queue names, e.g. --queue default,mail)", err)
			}
			queues = append(queues, q)
		}
	}
	switch {
	case f.concurrency < 0:
		return spawner.Spec{}, usagef("--concurrency must be at least 1")
	case f.maxJobs < 0, f.maxTimeSecs < 0, f.maxMemoryMB < 0:
		return spawner.Spec{}, usagef("--max-jobs, --max-time and --max-memory-mb must not be negative")
	case f.maxConns < 0:
		return spawner.Spec{}, usagef("--max-conns must not be negative")
	case f.tries < 0 || f.timeout < 0:
		return spawner.Spec{}, usagef("--tries and --timeout must not be negative")
	}
	backoff, err := parseBackoff(f.backoff)
	if err != nil {
		return spawner.Spec{}, err
	}
	return spawner.Spec{
		Supervisor:   f.supervisor,
		Queues:       queues,
		Master:       f.master,
		MasterTTL:    f.masterTTL,
		Worker:       f.workerName,
		Concurrency:  f.concurrency,
		MaxJobs:      f.maxJobs,
		MaxTime:      time.Duration(f.maxTimeSecs) * time.Second,
		MaxMemoryMB:  f.maxMemoryMB,
		Tries:        f.tries,
		Backoff:      backoff,
		Timeout:      f.timeout,
		Paused:       f.paused,
		PausedQueues: splitList(f.pausedQueues),
		MaxConns:     f.maxConns,
	}, nil
}

// workerConfig is the worker spec asks for, logging to log, with what the
// spec leaves open taken from the queue section of cfg: the same
// translation (worker.SpecConfig) as a master's in-process workers get.
func workerConfig(cfg *config.Config, spec spawner.Spec, log *slog.Logger) worker.Config {
	return worker.SpecConfig(spec, worker.Config{
		Queues:         cfg.Queue.Queues,
		Concurrency:    cfg.Queue.Workers,
		PollInterval:   time.Duration(cfg.Queue.PollIntervalMs) * time.Millisecond,
		Tries:          cfg.Queue.Tries,
		Backoff:        cfg.Queue.Backoff,
		DefaultTimeout: time.Duration(cfg.Queue.TimeoutSecs) * time.Second,
		TimeoutGrace:   time.Duration(cfg.Queue.TimeoutGraceSecs) * time.Second,
		Logger:         log,
		Redact:         cfg.Log.Redact,
	})
}

// splitList reads "a, b" into its trimmed, non-empty parts.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// reportWriter writes @fleet report lines to w, one whole line per write.
// A write that fails (the master is gone) is dropped: the worker learns of
// its master's end from its stdin.
func reportWriter(w io.Writer) func(spawner.Report) {
	var mu sync.Mutex
	return func(rep spawner.Report) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = w.Write(spawner.FormatReport(rep))
	}
}

// progressEvery is how often a hand-run worker logs its progress while it
// works.
const progressEvery = 5 * time.Second

// progressLogger turns a hand-run worker's heartbeats into an info line at
// most every interval while it works: attempts finished, their rate since
// the last line, jobs running. Nothing is logged while nothing changes. It
// runs in the worker's loop, which calls Reports; it needs no goroutine.
func progressLogger(log *slog.Logger, every time.Duration, now func() time.Time) func(spawner.Report) {
	var (
		lastAt      time.Time
		lastJobs    int64
		lastRunning int
		lastPaused  bool
	)
	return func(rep spawner.Report) {
		t := now()
		switch rep.Type {
		case spawner.ReportReady:
			lastAt = t
			return
		case spawner.ReportHeartbeat:
		default:
			return
		}
		if rep.Jobs == lastJobs && rep.Running == lastRunning && rep.Paused == lastPaused {
			return // idle, and nothing changed
		}
		elapsed := t.Sub(lastAt)
		if elapsed < every && rep.Running > 0 {
			return // busy: a line every interval
		}
		rate := 0.0
		if elapsed > 0 {
			rate = float64(rep.Jobs-lastJobs) / elapsed.Seconds()
		}
		log.Info("worker progress", "jobs", rep.Jobs, "jobs_per_sec", math.Round(rate*10)/10,
			"running", rep.Running, "paused", rep.Paused, "memory_mb", math.Round(rep.MemoryMB*10)/10)
		lastAt, lastJobs, lastRunning, lastPaused = t, rep.Jobs, rep.Running, rep.Paused
	}
}
