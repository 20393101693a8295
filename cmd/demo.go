package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/migrations"
	"github.com/fleet-go/fleet/pgcluster"
	"github.com/fleet-go/fleet/process"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// demoDir is where the demo keeps its private PostgreSQL (pgdata, its log
// pgdata.log), while a kept server runs its state file demo.json, and the
// configuration it ran with, demo.toml (see demoConfigFile), relative to
// the working directory.
const demoDir = ".fleet"

// demoConfigFile is the configuration file the demo writes for the
// commands it prints, as they name it: relative to the working directory.
const demoConfigFile = demoDir + "/demo.toml"

type demoFlags struct {
	keep, stop bool
}

func (r *runner) demoCommand() *cobra.Command {
	var f demoFlags
	c := &cobra.Command{
		Use:   "demo [--keep | --stop]",
		Short: "Run a demo: dispatch demo jobs and work them (starts a private PostgreSQL when none is configured)",
		Long: "With no database configured the demo starts a private PostgreSQL under .fleet/ in the " +
			"working directory (kept between runs, stopped on exit unless --keep). It migrates, dispatches a mix of " +
			"demo jobs and runs the real fleet master (two supervisors with their fleet:work processes, unless " +
			"fleet.supervisors are configured) until they are done, printing progress and what happened. Ctrl-C " +
			"stops the master and its workers (running jobs finish) before the server, and exits 130.\n\n" +
			"When what it did stays to be explored (the private server kept with --keep, or a configured " +
			"database.url, whose data stays whatever --keep says), it writes " + demoConfigFile + " (its " +
			"database and supervisors) and prints the commands to run next, such as " +
			"`APP_CONFIG=" + demoConfigFile + " go run ./cmd/app fleet`. --stop stops a kept private server.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return r.demo(c, f) },
	}
	c.Flags().BoolVar(&f.keep, "keep", false, "leave the private PostgreSQL running at the end and print the commands to explore it (a configured database.url keeps its data anyway)")
	c.Flags().BoolVar(&f.stop, "stop", false, "stop the private PostgreSQL a demo --keep left running, and exit")
	c.MarkFlagsMutuallyExclusive("keep", "stop")
	return c
}

// demoState is what demo --keep writes to .fleet/demo.json for demo --stop.
type demoState struct {
	URL       string    `json:"url"`
	DataDir   string    `json:"data_dir"`
	SocketDir string    `json:"socket_dir"`
	StartedAt time.Time `json:"started_at"`
}

func (r *runner) demoStatePath() string { return filepath.Join(r.app.Dir, demoDir, "demo.json") }

func (r *runner) demoDataDir() string { return filepath.Join(r.app.Dir, demoDir, "pgdata") }

func (r *runner) demo(c *cobra.Command, f demoFlags) error {
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	out := c.OutOrStdout()
	log := r.logger(cfg)
	if f.stop {
		return r.demoStop(c.Context(), out, log)
	}
	prefix := demoCommandPrefix()
	if len(cfg.Fleet.Supervisors) == 0 {
		cfg.Fleet.Supervisors = demoSupervisors()
	}
	// saved is what demo.toml holds: the configuration the demo runs with,
	// before the demo's own tweaks below.
	saved := *cfg
	// The demo runs no jobs of its own and leaves no row behind.
	cfg.Fleet.OnStop = master.OnStopLeave
	ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	url := cfg.Database.URL
	private := url == ""
	if private {
		dir := r.demoDataDir()
		fmt.Fprintf(out, "no database.url configured: starting a private PostgreSQL in %s\n", filepath.Dir(dir))
		prev, _ := r.readDemoState()
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: dir, Logger: log})
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintln(out, "interrupted")
				return &exitError{code: ExitInterrupted, err: ctx.Err(), silent: true}
			}
			return fmt.Errorf("start the demo's private PostgreSQL: %w", err)
		}
		if prev != nil && prev.SocketDir != prev.DataDir && prev.SocketDir != cluster.SocketDir() {
			// Start stopped the server a demo --keep left; drop its socket directory.
			_ = os.RemoveAll(prev.SocketDir)
		}
		url = cluster.URL("postgres")
		// Deferred first, so run last: after the master, its workers and
		// the pool are gone.
		defer func() {
			if f.keep {
				st := demoState{URL: url, DataDir: cluster.DataDir(), SocketDir: cluster.SocketDir(), StartedAt: time.Now().UTC()}
				if err := r.writeDemoState(st); err != nil {
					log.Error("write the demo's state file", "err", err)
				}
				fmt.Fprintf(out, "kept the private PostgreSQL running at APP_DATABASE__URL='%s'; stop it with `%s demo --stop`\n", url, prefix)
				return
			}
			if err := cluster.Stop(context.WithoutCancel(ctx)); err != nil {
				log.Error("stop the demo's PostgreSQL", "err", err)
			} else {
				fmt.Fprintf(out, "stopped the private PostgreSQL (data kept in %s; `%s demo --keep` leaves it running)\n", cluster.DataDir(), prefix)
			}
			_ = os.Remove(r.demoStatePath())
			_ = os.Remove(r.demoConfigPath()) // it would name a stopped server
		}()
		fmt.Fprintf(out, "private PostgreSQL ready: APP_DATABASE__URL='%s'\n", url)
	} else {
		fmt.Fprintf(out, "using database %s\n", config.RedactURL(url))
		if f.keep {
			fmt.Fprintln(out, "database.url is configured: the demo's jobs and history stay in that database; --keep, which keeps a private server running, changes nothing")
		}
	}

	// The configured database, through whatever database.pooler says; the
	// private server is PostgreSQL itself.
	db := process.Database{URL: url, Pooler: config.PoolerNone}
	if !private {
		if db, err = process.DatabaseOf(cfg); err != nil {
			return err
		}
	}
	lastID, err := r.demoMain(ctx, out, cfg, db, log)
	if lastID > 0 {
		if private && !f.keep {
			fmt.Fprintf(out, "the private PostgreSQL stops now; run `%s demo --keep` to keep it running, and it prints the commands to explore what happened\n", prefix)
		} else {
			saved.Database.URL, saved.Database.Pooler, saved.Database.DirectURL = db.URL, db.Pooler, db.DirectURL
			if werr := r.writeDemoConfig(&saved); werr != nil {
				err = errors.Join(err, werr)
			} else {
				r.demoExplore(out, cfg, prefix, lastID)
			}
		}
	}
	if ctx.Err() != nil {
		// An interrupt: whatever failed failed because of it, and the
		// master has stopped (demoRun waits for it).
		return &exitError{code: ExitInterrupted, err: ctx.Err(), silent: true}
	}
	return err
}

// demoMain migrates, dispatches the demo jobs and runs a master over them.
// It returns the id of the last demo job once they are dispatched.
func (r *runner) demoMain(ctx context.Context, out io.Writer, cfg *config.Config, db process.Database, log *slog.Logger) (int64, error) {
	target, err := db.MigrationTarget()
	if err != nil {
		return 0, err
	}
	n, err := migrations.Up(ctx, target.URL)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(out, "migrated: %d migration(s) applied\n", n)

	pool, err := process.OpenPool(ctx, db, max(cfg.Database.MaxConns, 6), "fleet demo")
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	client := queue.NewClient(pool, clientDefaults(cfg))
	res, err := client.DispatchMany(ctx, demoJobs())
	if err != nil {
		return 0, err
	}
	ids := queue.IDs(res)
	fmt.Fprintf(out, "dispatched %d demo jobs to queues default, mail and slow: noop, sleep, flaky (fails once, then succeeds) and fail (fails every try)\n", len(ids))
	lastID := ids[len(ids)-1]

	sups, err := supervisor.Resolve(process.SupervisorOptions(cfg, true))
	if err != nil {
		return lastID, err
	}
	sp, err := spawner.NewProcessSpawner(spawner.ProcessOptions{Dir: r.app.Dir, Output: r.app.Stderr, Logger: log})
	if err != nil {
		return lastID, err
	}
	// The children get the app's environment and the demo's database.
	for _, kv := range r.app.Environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			sp.Env(k, v)
		}
	}
	db.ChildEnv(sp)
	st := store.New(pool)
	m, err := r.newMaster(cfg, sups, st, sp)
	if err != nil {
		return lastID, err
	}
	fmt.Fprintf(out, "starting a fleet master with supervisors %s\n", describeSupervisors(sups))
	return lastID, r.demoRun(ctx, out, st, m, ids)
}

// demoRun runs the master until every demo job has finished or ctx ends,
// printing progress every second, then stops it, waits until it and its
// workers are gone, and prints what happened.
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
	// Every return below has waited for the master: it stops its workers,
	// releases what they held and leaves fleet_masters first.
	var res result
	stopped, finished := false, false // stopped: res holds the master's result
	var progressErr error
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
loop:
	for {
		select {
		case res = <-done: // the master stopped early: an error or fleet:terminate
			stopped = true
			break loop
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		left, err := r.demoProgress(ctx, out, st, ids, start)
		if err != nil {
			if ctx.Err() == nil {
				progressErr = err
			}
			break loop
		}
		if left == 0 {
			finished = true
			break loop
		}
	}
	if !stopped {
		if ctx.Err() != nil {
			fmt.Fprintln(out, "interrupted: stopping the fleet master and its workers (running jobs finish first)")
		}
		stopMaster()
		res = <-done
	}
	if ctx.Err() != nil && res.err != nil && errors.Is(res.err, context.Canceled) {
		res.err = nil // the master was stopped by the interrupt
	}
	// The summary is read even after an interrupt: with a context of its own.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	left, lerr := st.JobCountBetween(sctx, ids[0], ids[len(ids)-1])
	failed, ferr := st.FailedJobCountBetween(sctx, ids[0], ids[len(ids)-1])
	if err := errors.Join(progressErr, res.err, lerr, ferr); err != nil {
		return err
	}
	verb := "done"
	if !finished {
		verb = "stopped"
	}
	fmt.Fprintf(out, "%s in %s: %d jobs, %d completed, %d failed for good (see queue_failed_jobs), %d not run yet; %d workers started, %d recycled, %d crashed, %d attempts\n",
		verb, time.Since(start).Round(100*time.Millisecond), len(ids), int64(len(ids))-failed-left, failed, left,
		res.sum.Started, res.sum.Recycled, res.sum.Crashed, res.sum.Jobs)
	return nil
}

// demoProgress prints one progress line and returns how many demo jobs are
// left.
func (r *runner) demoProgress(ctx context.Context, out io.Writer, st *store.Store, ids []int64, start time.Time) (int64, error) {
	left, err := st.JobCountBetween(ctx, ids[0], ids[len(ids)-1])
	if err != nil {
		return 0, err
	}
	counts, err := st.QueueCounts(ctx)
	if err != nil {
		return 0, err
	}
	var parts []string
	for _, c := range counts {
		parts = append(parts, fmt.Sprintf("%s: %d pending, %d delayed, %d running", c.Queue, c.Pending, c.Delayed, c.Reserved))
	}
	fmt.Fprintf(out, "  %s  %d demo jobs left  %s\n", time.Since(start).Round(time.Second), left, strings.Join(parts, "; "))
	return left, nil
}

// demoExplore prints the commands that show what the demo did, each as it
// runs in the working directory: after `export APP_CONFIG=` the file
// writeDemoConfig wrote, prefix and a command of the CLI.
func (r *runner) demoExplore(out io.Writer, cfg *config.Config, prefix string, jobID int64) {
	fmt.Fprintln(out, "explore what happened, in this directory:")
	fmt.Fprintf(out, "  export APP_CONFIG=%s  # the demo's database and supervisors, for the commands below\n", demoConfigFile)
	for _, c := range []string{
		"fleet:failed                # the jobs that failed for good, with their errors",
		fmt.Sprintf("fleet:job %-17d # one job's whole story (the last demo job, a demo.fail)", jobID),
		"fleet:jobs --completed      # the completed attempts",
		"fleet:metrics               # per queue and job name: attempts, failures, runtimes",
		"fleet:workload              # per queue: pending, running, paused",
	} {
		fmt.Fprintf(out, "  %s %s\n", prefix, c)
	}
	if cfg.Fleet.Dashboard && cfg.Fleet.HTTP.Addr != "" {
		fmt.Fprintln(out, "and in a browser, the dashboard of a running master:")
		fmt.Fprintf(out, "  %s fleet:token create --name me --ability view,operate   # prints a token, once\n", prefix)
		fmt.Fprintf(out, "  %s fleet                     # a master working the demo's queues (Ctrl-C stops it); open http://%s%s and paste the token\n", prefix, cfg.Fleet.HTTP.Addr, cfg.Fleet.Path)
	} else {
		fmt.Fprintln(out, "and a master working the demo's queues (Ctrl-C stops it):")
		fmt.Fprintf(out, "  %s fleet\n", prefix)
	}
}

// demoCommandPrefix is how the commands the demo prints start: `go run`
// of the app's main package, relative to its module's root (the working
// directory the demo expects), so they run as printed after `go run
// ./cmd/app demo` as well as after a `go build`. When the build information
// does not name a main package of its module (a test binary), it is fleet's
// example app, ./cmd/app.
func demoCommandPrefix() string {
	if bi, ok := debug.ReadBuildInfo(); ok && !strings.HasSuffix(bi.Path, ".test") {
		switch {
		case bi.Path == bi.Main.Path && bi.Path != "":
			return "go run ."
		case bi.Main.Path != "" && strings.HasPrefix(bi.Path, bi.Main.Path+"/"):
			return "go run ./" + strings.TrimPrefix(bi.Path, bi.Main.Path+"/")
		}
	}
	return "go run ./cmd/app"
}

func (r *runner) demoConfigPath() string {
	return filepath.Join(r.app.Dir, filepath.FromSlash(demoConfigFile))
}

// writeDemoConfig writes the configuration the demo ran with, its database
// URL included (hence mode 0600), to demoConfigFile, so that the commands
// it prints, a following `fleet` above all, see the demo's database and
// supervisors.
//
// Only the keys whose value differs from config.Default() are written: the
// file stays short, and a later release's defaults still apply to the rest.
func (r *runner) writeDemoConfig(cfg *config.Config) error {
	b, err := config.MarshalChanges(cfg)
	if err != nil {
		return fmt.Errorf("write %s: %w", demoConfigFile, err)
	}
	head := "# Written by `demo`: the configuration the demo ran with, its database and\n" +
		"# supervisors included. Use it with APP_CONFIG=" + demoConfigFile + " or --config " + demoConfigFile + ".\n\n"
	if err := os.MkdirAll(filepath.Dir(r.demoConfigPath()), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", demoConfigFile, err)
	}
	if err := os.WriteFile(r.demoConfigPath(), append([]byte(head), b...), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", demoConfigFile, err)
	}
	return nil
}

// demoStop stops the private PostgreSQL that demo --keep left running.
func (r *runner) demoStop(ctx context.Context, out io.Writer, log *slog.Logger) error {
	dataDir := r.demoDataDir()
	st, err := r.readDemoState()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if st != nil && st.DataDir != "" {
		dataDir = st.DataDir
	}
	stopped, err := pgcluster.StopDataDir(ctx, dataDir, log)
	if err != nil {
		return fmt.Errorf("stop the demo's private PostgreSQL: %w", err)
	}
	if st != nil && st.SocketDir != "" && st.SocketDir != st.DataDir {
		// Start's temporary socket directory (the data directory's path was
		// too long for a socket path).
		_ = os.RemoveAll(st.SocketDir)
	}
	if err := os.Remove(r.demoStatePath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the demo's state file: %w", err)
	}
	if st != nil {
		// The configuration the kept demo wrote names the stopped server.
		if err := os.Remove(r.demoConfigPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", demoConfigFile, err)
		}
	}
	if stopped {
		fmt.Fprintf(out, "stopped the demo's private PostgreSQL in %s (data kept)\n", dataDir)
	} else {
		fmt.Fprintf(out, "no demo PostgreSQL is running in %s\n", dataDir)
	}
	return nil
}

func (r *runner) readDemoState() (*demoState, error) {
	b, err := os.ReadFile(r.demoStatePath())
	if err != nil {
		return nil, err
	}
	var st demoState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read %s: %w", r.demoStatePath(), err)
	}
	return &st, nil
}

func (r *runner) writeDemoState(st demoState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("write the demo's state: %w", err)
	}
	if err := os.WriteFile(r.demoStatePath(), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write the demo's state: %w", err)
	}
	return nil
}

// demoSupervisors are the demo's supervisors when the configuration has
// none.
func demoSupervisors() map[string]config.SupervisorConfig {
	n := func(v int) *int { return &v }
	return map[string]config.SupervisorConfig{
		"default": {Queues: []string{"default", "mail"}, Balance: "auto", MinProcesses: n(1), MaxProcesses: n(3), Concurrency: n(4), MaxJobs: 100},
		"slow":    {Queues: []string{"slow"}, Balance: "off", MinProcesses: n(1), MaxProcesses: n(1), Concurrency: n(4)},
	}
}

// demoJobs is the mix the demo dispatches.
func demoJobs() []*queue.JobSpec {
	var jobs []*queue.JobSpec
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
