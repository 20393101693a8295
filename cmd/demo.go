package cmd

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/migrations"
	"github.com/fleet-go/fleet/pgcluster"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// demoDir is where the demo keeps its private PostgreSQL, relative to the
// working directory.
const demoDir = ".fleet"

func (r *runner) demoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run a demo: dispatch demo jobs and work them (starts a private PostgreSQL when none is configured)",
		Long: "With no database configured the demo starts a private PostgreSQL under .fleet/ in the " +
			"working directory (kept between runs, stopped on exit). It migrates, dispatches a mix of " +
			"demo jobs and runs a worker until they are done, printing what happened.",
		Args: cobra.NoArgs,
		RunE: r.demo,
	}
}

func (r *runner) demo(c *cobra.Command, _ []string) error {
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	out := c.OutOrStdout()
	log := r.logger(cfg)
	ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	url := cfg.Database.URL
	if url == "" {
		dir := filepath.Join(r.app.Dir, demoDir, "pgdata")
		fmt.Fprintf(out, "no database.url configured: starting a private PostgreSQL in %s\n", filepath.Dir(dir))
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: dir, Logger: log})
		if err != nil {
			return fmt.Errorf("start the demo's private PostgreSQL: %w", err)
		}
		defer func() {
			if err := cluster.Stop(context.WithoutCancel(ctx)); err != nil {
				log.Error("stop the demo's PostgreSQL", "err", err)
			}
		}()
		url = cluster.URL("postgres")
	} else {
		fmt.Fprintf(out, "using database %s\n", config.RedactURL(url))
	}

	n, err := migrations.Up(ctx, url)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "migrated: %d migration(s) applied\n", n)

	pool, err := openPool(ctx, url, max(cfg.Database.MaxConns, 6))
	if err != nil {
		return err
	}
	defer pool.Close()
	client := queue.NewClient(pool, clientDefaults(cfg))
	jobs := demoJobs()
	ids, err := client.DispatchMany(ctx, jobs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "dispatched %d demo jobs to queues default and mail: noop, sleep, flaky (fails once, then succeeds) and fail (fails every try)\n", len(ids))

	st := store.New(pool)
	var finished atomic.Int64
	w, err := worker.New(st, r.app.Jobs, worker.Config{
		Queues:        []string{"default", "mail"},
		Concurrency:   8,
		StopWhenEmpty: true,
		PollInterval:  100 * time.Millisecond,
		Logger:        log,
		Reports: func(rep spawner.Report) {
			if rep.Type == spawner.ReportHeartbeat {
				finished.Store(rep.Jobs)
				fmt.Fprintf(out, "  worker: %d attempts finished, %d running, %.0f MB\n", rep.Jobs, rep.Running, rep.MemoryMB)
			}
		},
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "running a worker on default,mail with concurrency 8 until the queues are empty...")
	start := time.Now()
	res, err := w.Run(ctx)
	if err != nil {
		return err
	}
	return r.demoSummary(ctx, out, st, ids, res, time.Since(start))
}

func (r *runner) demoSummary(ctx context.Context, out io.Writer, st *store.Store, ids []int64, res worker.Result, took time.Duration) error {
	failed, err := st.FailedJobCountBetween(ctx, ids[0], ids[len(ids)-1])
	if err != nil {
		return err
	}
	counts, err := st.QueueCounts(ctx)
	if err != nil {
		return err
	}
	var left int64
	for _, q := range counts {
		left += q.Pending + q.Delayed + q.Reserved
	}
	fmt.Fprintf(out, "done in %s (%s): %d jobs, %d attempts, %d completed, %d failed for good (in queue_failed_jobs), %d still queued\n",
		took.Round(time.Millisecond), res.Reason, len(ids), res.Jobs, int64(len(ids))-failed-left, failed, left)
	return nil
}

// demoJobs is the mix the demo dispatches.
func demoJobs() []*queue.Job {
	var jobs []*queue.Job
	for range 200 {
		jobs = append(jobs, queue.NewJob("demo.noop", nil))
	}
	for i := range 40 {
		jobs = append(jobs, queue.NewJob("demo.sleep", map[string]int{"ms": 50 + 10*(i%10)}).OnQueue("mail"))
	}
	for range 10 {
		jobs = append(jobs, queue.NewJob("demo.flaky", map[string]int{"fail_times": 1}).Tries(3).Backoff(0))
	}
	for range 3 {
		jobs = append(jobs, queue.NewJob("demo.fail", nil).Tries(2).Backoff(0))
	}
	return jobs
}
