package cmd

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/membership"
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
	var f workFlags
	c := &cobra.Command{
		Use:   "fleet:work [--queue a,b] [--concurrency N]",
		Short: "Run a worker: claim and run jobs from the given queues",
		Long: "Run up to --concurrency jobs at once from the listed queues, in priority order. " +
			"At a limit, on SIGTERM/SIGINT, or with --stop-when-empty once idle, it takes no new jobs, " +
			"finishes the running ones and exits 0. A fleet master starts these itself.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return r.work(c, f) },
	}
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
	return c
}

func (r *runner) work(c *cobra.Command, f workFlags) error {
	// A master announces the worker's report pipe in the environment. No
	// handler needs to know, and no program a handler starts may inherit
	// it: it leaves the environment before anything else runs.
	announced, piped := environValue(r.app.Environ, spawner.ProtocolFDEnv)
	_ = os.Unsetenv(spawner.ProtocolFDEnv)
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	wcfg, err := workerConfig(cfg, f)
	if err != nil {
		return err
	}
	db, err := databaseOf(cfg)
	if err != nil {
		return err
	}
	log := r.logger(cfg)
	if f.supervisor != "" {
		log = log.With("supervisor", f.supervisor)
	}
	wcfg.Logger = log
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

	var sink *commandSink
	if f.master != "" {
		// Under a master: commands arrive on stdin from the start, and
		// stdin closing means the master is gone, so stop (finishing
		// running jobs). The reader ends with the process.
		sink = newCommandSink()
		go readCommands(r.app.Stdin, sink, log)
	}
	appName := "fleet:work " + cmp.Or(f.workerName, hostPID())
	maxConns := cmp.Or(f.maxConns, cfg.Database.MaxConns, supervisor.WorkerConnections-1)
	if f.master == "" && f.maxConns == 0 && cfg.Database.MaxConns == 0 {
		maxConns++ // run by hand, it also beats its own membership row
	}
	pool, err := openPool(ctx, db, maxConns, appName)
	if err != nil && sink != nil && errors.Is(err, errUnreachable) {
		// A child started while the database is away waits for it rather
		// than exiting: a crash would cost the group a restart backoff for
		// an outage that is nobody's fault.
		pool, err = waitForDatabase(ctx, sink, db, maxConns, appName, log, wcfg.Reports, err)
		if pool == nil && err == nil {
			return nil // stopped while waiting
		}
	}
	if err != nil {
		return err
	}
	defer closePool(pool)
	st, err := db.listenStore(store.New(pool))
	if err != nil {
		return err
	}
	log.Info("database pooler", "pooler", db.pooler, "wake_up", db.wakeups(wcfg.PollInterval))
	if f.master == "" {
		// Run by hand: the worker keeps a membership row of its own, so
		// that masters know it is alive (and never release a job it still
		// runs, however long its timeout) and release its jobs once it is
		// gone.
		if wcfg.Name == "" {
			wcfg.Name = worker.DefaultName()
		}
		ttl := time.Duration(cfg.Fleet.MasterTTLSecs) * time.Second
		member, err := membership.New(st, membership.Config{
			Kind: store.KindWorker, Name: wcfg.Name, Version: versionInfo(r.app.Version).Short(), TTL: ttl,
			Interval: max(ttl/4, 10*time.Millisecond), Logger: log,
			Report: func() (string, any) { return "running", map[string]any{"queues": wcfg.Queues} },
		})
		if err != nil {
			return fmt.Errorf("worker %q: %w", wcfg.Name, err)
		}
		if err := member.Start(ctx); err != nil {
			return err
		}
		defer func() {
			lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := member.Stop(lctx, 0); err != nil {
				log.Warn("remove the worker's membership row failed; it expires on its own", "err", err)
			}
		}()
		wcfg.Master, wcfg.MasterTTL = member.Instance(), ttl
	}
	w, err := worker.New(st, r.app.Jobs, wcfg)
	if err != nil {
		return err
	}
	if sink != nil {
		sink.attach(w)
	}
	_, err = w.Run(ctx)
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

// workerConfig merges the command's flags over the queue section.
func workerConfig(cfg *config.Config, f workFlags) (worker.Config, error) {
	queues := cfg.Queue.Queues
	if strings.TrimSpace(f.queues) != "" {
		queues = nil
		for _, q := range strings.Split(f.queues, ",") {
			q = strings.TrimSpace(q)
			if err := queue.CheckQueue("--queue", q); err != nil {
				return worker.Config{}, usagef("%w (a comma-separated list of queue names, e.g. --queue default,mail)", err)
			}
			queues = append(queues, q)
		}
	}
	switch {
	case f.concurrency < 0:
		return worker.Config{}, usagef("--concurrency must be at least 1")
	case f.maxJobs < 0, f.maxTimeSecs < 0, f.maxMemoryMB < 0:
		return worker.Config{}, usagef("--max-jobs, --max-time and --max-memory-mb must not be negative")
	case f.maxConns < 0:
		return worker.Config{}, usagef("--max-conns must not be negative")
	}
	concurrency := f.concurrency
	if concurrency == 0 {
		concurrency = cfg.Queue.Workers
	}
	if f.tries < 0 || f.timeout < 0 {
		return worker.Config{}, usagef("--tries and --timeout must not be negative")
	}
	backoff := cfg.Queue.Backoff
	if f.backoff != "" {
		b, err := parseBackoff(f.backoff)
		if err != nil {
			return worker.Config{}, err
		}
		backoff = b
	}
	timeout := time.Duration(cfg.Queue.TimeoutSecs) * time.Second
	if f.timeout > 0 {
		timeout = f.timeout
	}
	return worker.Config{
		Queues:         queues,
		Concurrency:    concurrency,
		MaxJobs:        f.maxJobs,
		MaxTime:        time.Duration(f.maxTimeSecs) * time.Second,
		MaxMemoryMB:    f.maxMemoryMB,
		StopWhenEmpty:  f.stopWhenEmpty,
		PollInterval:   time.Duration(cfg.Queue.PollIntervalMs) * time.Millisecond,
		Tries:          cmp.Or(f.tries, cfg.Queue.Tries),
		Backoff:        backoff,
		DefaultTimeout: timeout,
		Paused:         f.paused,
		PausedQueues:   splitList(f.pausedQueues),
		Name:           f.workerName,
		TimeoutGrace:   time.Duration(cfg.Queue.TimeoutGraceSecs) * time.Second,
		Master:         f.master,
		MasterTTL:      f.masterTTL,
		Redact:         cfg.Log.Redact,
	}, nil
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

// readCommands applies @fleet commands from the master until in ends; then
// the master is gone and the worker stops.
func readCommands(in io.Reader, w *commandSink, log *slog.Logger) {
	sc := bufio.NewScanner(in)
	warned := false
	for sc.Scan() {
		line := sc.Text()
		c, err := spawner.ParseCommand(line)
		if err != nil {
			if !warned {
				log.Warn("ignoring a malformed line from the master", "err", err)
				warned = true
			}
			continue
		}
		w.apply(c)
	}
	log.Info("master closed stdin: stopping")
	w.apply(spawner.Command{Type: spawner.CommandStop})
}

// commandSink applies the master's commands to the worker, and holds them
// while the worker does not exist yet (the database is away at start): a
// stop then ends the wait, and the pause state is applied on attach.
type commandSink struct {
	mu           sync.Mutex
	w            *worker.Worker
	stopped      chan struct{}
	stopOnce     sync.Once
	paused       *bool
	pausedQueues []string
	queuesSet    bool
}

func newCommandSink() *commandSink { return &commandSink{stopped: make(chan struct{})} }

func (s *commandSink) apply(c spawner.Command) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Type == spawner.CommandStop {
		s.stopOnce.Do(func() { close(s.stopped) })
	}
	if w := s.w; w != nil {
		switch c.Type {
		case spawner.CommandPause:
			w.Pause()
		case spawner.CommandContinue:
			w.Continue()
		case spawner.CommandStop:
			w.Stop()
		case spawner.CommandPauseQueues:
			w.PauseQueues(c.Queues)
		}
		return
	}
	switch c.Type {
	case spawner.CommandPause, spawner.CommandContinue:
		p := c.Type == spawner.CommandPause
		s.paused = &p
	case spawner.CommandPauseQueues:
		s.pausedQueues, s.queuesSet = c.Queues, true
	}
}

// attach hands the commands held so far to w, and every later one.
func (s *commandSink) attach(w *worker.Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w = w
	if s.paused != nil {
		if *s.paused {
			w.Pause()
		} else {
			w.Continue()
		}
	}
	if s.queuesSet {
		w.PauseQueues(s.pausedQueues)
	}
	select {
	case <-s.stopped:
		w.Stop()
	default:
	}
}

// waitForDatabase retries opening the pool with a capped, jittered backoff
// until the database answers, ctx ends or the master says stop (then it
// returns nil, nil). The outage is logged once, then at most once a
// minute with the number of tries, and once when the database is back.
// After every failed try it reports why it waits (spawner.ReportWaiting),
// so that its master does not take it for hung.
func waitForDatabase(ctx context.Context, sink *commandSink, db database, maxConns int, appName string, log *slog.Logger, report func(spawner.Report), first error) (*pgxpool.Pool, error) {
	log.Warn("cannot connect to the database at start; waiting for it", "err", first)
	waiting := func(err error) {
		if report != nil {
			report(spawner.Report{Type: spawner.ReportWaiting, PID: os.Getpid(), Waiting: err.Error()})
		}
	}
	waiting(first)
	backoff, tries, loggedAt := 500*time.Millisecond, 1, time.Now()
	for {
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-sink.stopped:
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		pool, err := openPool(ctx, db, maxConns, appName)
		tries++
		if err == nil {
			log.Info("the database is reachable: starting", "tries", tries)
			return pool, nil
		}
		if !errors.Is(err, errUnreachable) {
			return nil, err
		}
		waiting(err)
		if time.Since(loggedAt) >= time.Minute {
			log.Warn("the database is still unreachable; waiting for it", "tries", tries, "err", err)
			loggedAt = time.Now()
		}
		backoff = min(backoff*2, 4*time.Second)
	}
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
