package cmd

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/process"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
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
	payloadBudget byteBudget
	stopWhenEmpty bool
	reports       bool
	isolate       bool
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
	fl.Var(&f.payloadBudget, "payload-budget-bytes", "the most payload bytes the worker holds, claimed and running jobs together (0: no bound; default queue.payload_budget_bytes)")
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
	fl.BoolVar(&f.isolate, "isolate", false, "run as an isolation process: take only suspect jobs (in two or more crashed processes), one at a time, and exit when none is ready (set by the master)")
	fl.BoolVar(&f.reports, "reports", false, "write @fleet report lines to stdout without --master (for tools that watch a hand-run worker, such as app bench)")
	_ = fl.MarkHidden("reports")
}

func (r *runner) work(c *cobra.Command, f workFlags) error {
	pipe := process.TakeWorkerEnviron(r.app.Environ)
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	spec, err := f.spec()
	if err != nil {
		return err
	}
	code, err := process.RunWorker(c.Context(), process.WorkerProcess{
		Config: cfg, Spec: spec, StopWhenEmpty: f.stopWhenEmpty, Reports: f.reports, Pipe: pipe,
		Jobs: r.app.Jobs, Stdin: r.app.Stdin, Stdout: r.app.Stdout,
		Logger: r.logger(cfg), Version: versionInfo(r.app.Version).Short(),
	})
	switch code {
	case ExitJobTimedOut, ExitUnsaved:
		return &exitError{code: code, err: err}
	}
	return err
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
	case f.payloadBudget.bytes < 0:
		return spawner.Spec{}, usagef("--payload-budget-bytes must not be negative (0: no bound), got %d", f.payloadBudget.bytes)
	}
	backoff, err := parseBackoff(f.backoff)
	if err != nil {
		return spawner.Spec{}, err
	}
	return spawner.Spec{
		Supervisor:    f.supervisor,
		Queues:        queues,
		Master:        f.master,
		MasterTTL:     f.masterTTL,
		Worker:        f.workerName,
		Concurrency:   f.concurrency,
		MaxJobs:       f.maxJobs,
		MaxTime:       time.Duration(f.maxTimeSecs) * time.Second,
		MaxMemoryMB:   f.maxMemoryMB,
		Tries:         f.tries,
		Backoff:       backoff,
		Timeout:       f.timeout,
		PayloadBudget: f.payloadBudget.spec(),
		Paused:        f.paused,
		PausedQueues:  splitList(f.pausedQueues),
		MaxConns:      f.maxConns,
		Isolate:       f.isolate,
	}, nil
}

// byteBudget is --payload-budget-bytes: a number of bytes, and whether
// it was given, since 0 asks for no bound while its absence leaves the
// configuration's.
type byteBudget struct {
	bytes int64
	set   bool
}

func (b *byteBudget) String() string {
	if !b.set {
		return ""
	}
	return strconv.FormatInt(b.bytes, 10)
}

func (b *byteBudget) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("want a whole number of bytes, got %q", s)
	}
	b.bytes, b.set = n, true
	return nil
}

func (b *byteBudget) Type() string { return "bytes" }

// spec is the budget as spawner.Spec.PayloadBudget says it: 0 when not
// given, negative for no bound.
func (b byteBudget) spec() int64 {
	if b.set && b.bytes == 0 {
		return -1
	}
	return b.bytes
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
