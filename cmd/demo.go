package cmd

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/migrations"
	"github.com/fleet-go/fleet/pgcluster"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
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
			"demo jobs and runs the real fleet master (two supervisors with their fleet:work processes) " +
			"until they are done, printing progress and what happened.",
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
	fmt.Fprintf(out, "dispatched %d demo jobs to queues default, mail and slow: noop, sleep, flaky (fails once, then succeeds) and fail (fails every try)\n", len(ids))

	sups := demoSupervisors()
	if len(cfg.Fleet.Supervisors) > 0 {
		if sups, err = supervisor.Resolve(supervisorOptions(cfg, true)); err != nil {
			return err
		}
	}
	sp, err := spawner.NewProcessSpawner(spawner.ProcessOptions{Dir: r.app.Dir, Output: r.app.Stderr, Logger: log})
	if err != nil {
		return err
	}
	sp.Env("APP_DATABASE__URL", url) // the children use the same database
	st := store.New(pool)
	m, _, err := r.newMaster(cfg, sups, st, sp)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "starting a fleet master with supervisors %s\n", describeSupervisors(sups))
	return r.demoRun(ctx, out, st, m, ids)
}

// demoRun runs the master until every demo job has finished, printing
// progress every second, then stops it and prints what happened.
func (r *runner) demoRun(ctx context.Context, out io.Writer, st *store.Store, m *master.Master, ids []int64) error {
	mctx, stopMaster := context.WithCancel(ctx)
	defer stopMaster()
	type result struct {
		sum master.Summary
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		sum, err := m.Run(mctx)
		done <- result{sum, err}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case res := <-done: // the master stopped early: a signal or an error
			return res.err
		case <-tick.C:
		}
		left, err := st.JobCountBetween(ctx, ids[0], ids[len(ids)-1])
		if err != nil {
			return err
		}
		counts, err := st.QueueCounts(ctx)
		if err != nil {
			return err
		}
		var parts []string
		for _, c := range counts {
			parts = append(parts, fmt.Sprintf("%s: %d pending, %d delayed, %d running", c.Queue, c.Pending, c.Delayed, c.Reserved))
		}
		fmt.Fprintf(out, "  %s  %d demo jobs left  %s\n", time.Since(start).Round(time.Second), left, strings.Join(parts, "; "))
		if left == 0 {
			break
		}
	}
	stopMaster()
	res := <-done
	if res.err != nil {
		return res.err
	}
	failed, err := st.FailedJobCountBetween(ctx, ids[0], ids[len(ids)-1])
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "done in %s: %d jobs, %d completed, %d failed for good (see queue_failed_jobs); %d workers started, %d recycled, %d crashed, %d attempts\n",
		time.Since(start).Round(100*time.Millisecond), len(ids), int64(len(ids))-failed, failed,
		res.sum.Started, res.sum.Recycled, res.sum.Crashed, res.sum.Jobs)
	return nil
}

// demoSupervisors are the demo's supervisors when the configuration has
// none.
func demoSupervisors() []supervisor.Supervisor {
	return []supervisor.Supervisor{
		{Name: "default", Queues: []string{"default", "mail"}, Balance: supervisor.BalanceAuto,
			MinProcesses: 1, MaxProcesses: 3, Concurrency: 4, MaxJobs: 100},
		{Name: "slow", Queues: []string{"slow"}, Balance: supervisor.BalanceOff, MinProcesses: 1, MaxProcesses: 1, Concurrency: 4},
	}
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
	for range 8 {
		jobs = append(jobs, queue.NewJob("demo.sleep", map[string]int{"ms": 1000}).OnQueue("slow"))
	}
	for range 10 {
		jobs = append(jobs, queue.NewJob("demo.flaky", map[string]int{"fail_times": 1}).Tries(3).Backoff(0))
	}
	for range 3 {
		jobs = append(jobs, queue.NewJob("demo.fail", nil).Tries(2).Backoff(0))
	}
	return jobs
}
