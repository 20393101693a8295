package cmd

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/bench"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/process"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

func (r *runner) benchCommand() *cobra.Command {
	var f bench.Flags
	c := &cobra.Command{
		Use:   "bench [--scenario bound|drain|paths|held|cold|masters|prefetch|latency|dispatch|idle|backlog|scale|peers|payload|all] [--jobs N] [--json]",
		Short: "Measure throughput and latency of this app's fleet on the configured database",
		Long: "Runs benchmark scenarios on the configured database (database.url) with the real master " +
			"and real fleet:work children of this executable, and prints a table (or, with --json, one " +
			"JSON document) on stdout; progress goes to stderr once a second.\n\n" +
			"Every throughput is also given as a ratio to the bound: a raw SQL loop in this process " +
			"(4 connections, lock a batch with FOR UPDATE SKIP LOCKED, delete it, commit) on the same " +
			"database, measured first in the same run (batch 1000 is the reference).\n\n" +
			"Scenarios: bound (the reference, batch 100 and 1000); drain (--jobs no-op jobs through a " +
			"master with one supervisor, 2 processes × 64); paths (--rounds rounds of --jobs no-op jobs " +
			"through one fleet:work × 1000, one × 64 and a master of 2 × 500, with the ratios of their " +
			"medians and the master's ratio to the durable bound); held (--rounds rounds of --jobs no-op jobs " +
			"through a master process of 2 × 200, each drained once without and once with another session's " +
			"transaction held open, alternated, with both rates, their ratio and the CPU per job of each); cold (--rounds alternated rounds of --jobs " +
			"no-op jobs through a master process of 2 × 500 and through one fleet:work × 1000, each started " +
			"onto the backlog and timed from its start to the queue empty, and the ratio of their medians); " +
			"masters (--rounds rounds of --jobs no-op jobs through N master processes on the database for " +
			"each N of --masters (1, 2, 4, 8), one process of 1000/N slots each, timed from their start, each " +
			"N's rate and CPU per job and their ratios to the first N's); prefetch (--rounds rounds of a " +
			"master of 3 × 4 dispatched 300 jobs of 5 ms, or of 0 ms, then 12 jobs of 3 s: how far apart the 12 " +
			"start and how many jobs each worker ran); latency (one job at a time into an idle " +
			"fleet: dispatch to handler start, dispatch to outcome written); dispatch (Dispatch from 1 " +
			"and 16 goroutines, DispatchMany in batches of 1000 and one large batch); idle (a master " +
			"process with 10 supervisors of 5 queues each, nothing to do, for --idle-secs: CPU, peak RSS, " +
			"transactions per second); backlog (--backlog pending jobs: a claim, Workload and " +
			"/metrics latency, then a drain for --sustain while jobs are dispatched at 80 % of the " +
			"measured drain rate); scale (drain rate of one fleet:work process per backlog size × " +
			"concurrency); peers (--rounds rounds of --jobs no-op jobs through a master of 2 × 500, one " +
			"fleet:work × 1000, River and graphile-worker, at the versions bench/peers/install.sh pins and " +
			"installs into --peers-dir, each peer in a schema of its own that is dropped after; a peer not " +
			"installed is left out with a line saying how to install it); payload (for each of --payload-sizes, " +
			"--payload-mb MiB of jobs with a payload of that size, dispatched by 'app dispatch --count' and " +
			"drained by one fleet:work × --payload-concurrency, each a process of its own: MB/s of each and " +
			"the peak RSS of the dispatcher and of the worker); all (every scenario in that " +
			"order but peers and payload, one bound).\n\n" +
			"The bench migrates nothing: run 'app migrate' first. It uses only queues named " + bench.Prefix +
			"*, refuses a database holding jobs of any other queue unless --force, and deletes its " +
			"queues' jobs, failed jobs, history, counters and snapshots before and after (also after " +
			"Ctrl-C). Its jobs run the handler " + bench.JobName + ", which the bench registers in its own " +
			"process and in the processes it starts (unless the app has a handler of that name), and " +
			"nowhere else. Use a database of its own: the bench loads it heavily.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			f.SustainSet = c.Flags().Changed("sustain")
			return r.bench(c, f)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.Scenario, "scenario", "all", "bound, drain, paths, held, cold, masters, prefetch, latency, dispatch, idle, backlog, scale, peers, payload or all")
	fl.IntVar(&f.Jobs, "jobs", 200000, "jobs for bound, drain, paths, held, cold, masters, dispatch and peers")
	fl.IntVar(&f.Backlog, "backlog", 1000000, "pending jobs for the backlog scenario")
	fl.DurationVar(&f.Sustain, "sustain", 0, "sustained drain of the backlog scenario (default 10m, 2m under --scenario all)")
	fl.IntVar(&f.IdleSecs, "idle-secs", 60, "seconds the idle scenario measures")
	fl.IntVar(&f.Rounds, "rounds", 3, "rounds of the paths, held, cold, masters, prefetch and peers scenarios (each drains every path once)")
	fl.IntVar(&f.CellSecs, "cell-secs", 15, "seconds per scale cell, the backlog kept topped up (0: drain each cell fully)")
	fl.IntVar(&f.Samples, "samples", 200, "jobs the latency scenario times")
	fl.StringVar(&f.ScaleBacklogs, "scale-backlogs", "10000,100000,1000000", "backlog sizes of the scale grid")
	fl.StringVar(&f.ScaleConcurrency, "scale-concurrency", "1,16,64,256,1000", "concurrencies of the scale grid")
	fl.StringVar(&f.Masters, "masters", bench.DefaultMasters, "numbers of masters the masters scenario compares, the first the reference")
	fl.StringVar(&f.PayloadSizes, "payload-sizes", bench.DefaultPayloadSizes, "payload sizes of the payload scenario, in KiB, comma-separated")
	fl.IntVar(&f.PayloadMB, "payload-mb", bench.DefaultPayloadMB, "MiB of payloads the payload scenario dispatches and drains for each size")
	fl.IntVar(&f.PayloadConc, "payload-concurrency", bench.DefaultPayloadConc, "concurrency of the payload scenario's worker")
	fl.StringVar(&f.PeersDir, "peers-dir", bench.DefaultPeersDir, "where the peers scenario finds River and graphile-worker (see bench/peers/install.sh)")
	fl.BoolVar(&f.JSON, "json", false, "print one JSON document instead of the table")
	fl.BoolVar(&f.Force, "force", false, "run on a database that holds jobs of other queues")
	return c
}

// bench runs "app bench": the flags checked, the configuration loaded and
// the pool opened here, the scenarios in package bench.
func (r *runner) bench(c *cobra.Command, f bench.Flags) error {
	plan, err := bench.NewPlan(f)
	if err != nil {
		return err
	}
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	db, err := process.DatabaseOf(cfg)
	if err != nil {
		return err
	}
	url := db.URL
	ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The master and the sixteen dispatching goroutines share the pool.
	pool, err := process.OpenPool(ctx, db, max(cfg.Database.MaxConns, 24), "fleet bench")
	if err != nil {
		return err
	}
	defer process.ClosePool(pool)
	// This process runs the bench, so it has the bench's handler; the
	// processes it starts get it through bench.EnvRun (see ExecuteContext).
	bench.Register(r.app.Jobs)
	return bench.Run(ctx, plan, bench.Options{
		Config: cfg, URL: url, Pooler: db.Pooler, DirectURL: db.DirectURL, Pool: pool,
		NewMaster: func(cfg *config.Config, sups []supervisor.Supervisor, st *store.Store, sp spawner.Spawner) (*master.Master, error) {
			return r.newMaster(cfg, sups, st, sp)
		},
		Logger:  r.logger,
		Dir:     r.app.Dir,
		Environ: r.app.Environ, ConfigPath: r.configPath,
		Stdout: c.OutOrStdout(), Stderr: c.ErrOrStderr(),
	})
}
