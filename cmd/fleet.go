package cmd

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/internal/backoff"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/process"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// describeBudget renders a budget for people: "at most 38 (the master 4,
// its dashboard 2, 8 processes × 4)", the cap when there is one
// (fleet.max_connections, configured as maxConnections, or the server's
// room), and how the server's room was made when it was read.
func describeBudget(b supervisor.Budget, maxConnections int) string {
	parts := []string{fmt.Sprintf("the master %d", b.Master)}
	if b.Dashboard > 0 {
		parts = append(parts, fmt.Sprintf("its dashboard %d", b.Dashboard))
	}
	procs, capped := b.Processes, ""
	switch {
	case b.Cap > 0 && b.Cap == maxConnections:
		procs, capped = b.Limit, fmt.Sprintf(", within fleet.max_connections = %d", b.Cap)
	case b.Cap > 0 && b.Server != nil && b.Cap > b.Server.Room():
		procs, capped = b.Limit, fmt.Sprintf(", %d over the server's room of %d: taken from the reserve", b.Cap-b.Server.Room(), b.Server.Room())
	case b.Cap > 0:
		procs, capped = b.Limit, fmt.Sprintf(", within the server's room of %d", b.Cap)
	}
	parts = append(parts, fmt.Sprintf("%d processes × %d", procs, b.Worker))
	out := fmt.Sprintf("at most %d (%s%s)", b.Total, strings.Join(parts, ", "), capped)
	if b.Server != nil {
		out += "; the server's room: " + b.Server.String()
	}
	return out
}

// getenv looks key up in the app's environment (App.Environ), the last
// entry winning as in a process environment.
func (r *runner) getenv(key string) string {
	v := ""
	for _, kv := range r.app.Environ {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

func (r *runner) fleetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "fleet",
		Short: "Run the fleet master: start, balance and supervise fleet:work processes",
		Long: "The master runs no jobs. It starts fleet:work children of this executable for each " +
			"supervisor, balances them across queues, recycles and restarts them, applies pause and " +
			"terminate requests, and releases the jobs of workers and masters that died. " +
			"SIGTERM or SIGINT stops every child gracefully.",
		Args: cobra.NoArgs,
		RunE: r.fleet,
	}
}

func (r *runner) fleet(c *cobra.Command, _ []string) error {
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	sups, err := supervisor.Resolve(process.SupervisorOptions(cfg, true))
	if err != nil {
		return err
	}
	// Bad schedules fail the boot before anything connects, and so does a
	// connection cap the fleet cannot fit in (process.RunMaster checks it
	// first).
	opts, err := r.masterOptions(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	out := c.OutOrStdout()
	_, err = process.RunMaster(ctx, process.MasterProcess{
		MasterOptions: opts,
		Supervisors:   sups,
		Children:      spawner.ProcessOptions{Dir: r.app.Dir, Output: r.app.Stderr, Logger: opts.Logger},
		ConfigFile:    r.configPath,
		Serving: func(addr, dashboardPath string) {
			fmt.Fprintf(out, "serving /metrics, /healthz and /readyz on http://%s\n", addr)
			if dashboardPath != "" {
				fmt.Fprintf(out, "serving the dashboard on http://%s%s (sign in with a token of app fleet:token create)\n", addr, dashboardPath)
			}
		},
		Running: func(m *master.Master, settings master.Settings) {
			fmt.Fprintf(out, "fleet master %s running supervisors %s\n", m.Name(), describeSupervisors(sups))
			fmt.Fprintf(out, "connections: %s\n", describeBudget(settings.Connections, cfg.Fleet.MaxConnections))
		},
		Stopped: func(sum master.Summary) {
			unsaved := ""
			if sum.Unsaved > 0 {
				unsaved = fmt.Sprintf(", %d outcomes not written (their jobs run again)", sum.Unsaved)
			}
			fmt.Fprintf(out, "fleet master stopped: %d workers started, %d recycled, %d crashed, %d jobs run%s\n",
				sum.Started, sum.Recycled, sum.Crashed, sum.Jobs, unsaved)
		},
	})
	return err
}

// masterOptions is what the master of this app is built from: its
// configuration, logger and version, the app's long-wait listener, and its
// periodic schedules (whose errors it returns).
func (r *runner) masterOptions(cfg *config.Config) (process.MasterOptions, error) {
	schedules, err := periodicSchedules(cfg, r.app.Jobs)
	if err != nil {
		return process.MasterOptions{}, err
	}
	return process.MasterOptions{
		Config: cfg, Getenv: r.getenv, Version: versionInfo(r.app.Version).Short(),
		Logger: r.logger(cfg), OnLongWait: r.app.OnLongWait, Periodic: schedules,
	}, nil
}

// newMaster builds the master the configuration describes (see
// process.BuildMaster); the demo and the bench share it.
func (r *runner) newMaster(cfg *config.Config, sups []supervisor.Supervisor, st *store.Store, sp spawner.Spawner) (*master.Master, error) {
	opts, err := r.masterOptions(cfg)
	if err != nil {
		return nil, err
	}
	opts.Name = process.MasterName(cfg, r.getenv)
	m, _, err := process.BuildMaster(st, sups, sp, opts)
	return m, err
}

// describeSupervisors renders "default (auto: default,mail, up to 4
// processes); ..." for people.
func describeSupervisors(sups []supervisor.Supervisor) string {
	names := make([]string, len(sups))
	for i, s := range sups {
		names[i] = fmt.Sprintf("%s (%s: %s, up to %d processes)", s.Name, s.Balance, strings.Join(s.Queues, ","), s.MaxProcesses)
	}
	return strings.Join(names, "; ")
}

// withStore runs fn with a store on the configured database.
func (r *runner) withStore(ctx context.Context, fn func(*config.Config, *store.Store) error) error {
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	db, err := process.DatabaseOf(cfg)
	if err != nil {
		return err
	}
	pool, err := process.OpenPool(ctx, db, 2, "fleet cli")
	if err != nil {
		return err
	}
	defer process.ClosePool(pool)
	return fn(cfg, store.New(pool))
}

// checkSupervisor fails unless name is a supervisor of this app's config.
func checkSupervisor(cfg *config.Config, name string) error {
	sups, err := supervisor.Resolve(process.SupervisorOptions(cfg, false))
	if err != nil {
		return err
	}
	var have []string
	for _, s := range sups {
		have = append(have, s.Name)
	}
	if !slices.Contains(have, name) {
		return notFoundf("no supervisor named %q in this app's configuration (have: %s)", name, strings.Join(have, ", "))
	}
	return nil
}

// pauseAction is what fleet:pause or fleet:continue does to a queue, a
// supervisor, or every supervisor ("").
type pauseAction struct {
	use, short, verb, queueHelp string
	queue                       func(*fleet.Service, context.Context, string) error
	supervisor                  func(*fleet.Service, context.Context, string) error
}

func (r *runner) pauseActionCommand(a pauseAction) *cobra.Command {
	var queueName string
	var asJSON bool
	c := &cobra.Command{
		Use:   a.use,
		Short: a.short,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if c.Flags().Changed("queue") {
				// An explicit empty --queue must not fall through to
				// "every supervisor".
				if err := queue.CheckQueue("--queue", queueName); err != nil {
					return usage(err)
				}
			}
			return r.withService(c.Context(), func(cfg *config.Config, svc *fleet.Service) error {
				ctx, out := c.Context(), c.OutOrStdout()
				var target map[string]any
				switch {
				case queueName != "" && len(args) > 0:
					return usagef("give a supervisor or --queue, not both")
				case queueName != "":
					if a.verb == "paused" {
						warnUnworkedQueue(c, cfg, queueName)
					}
					if err := a.queue(svc, ctx, queueName); err != nil {
						return err
					}
					target = map[string]any{"queue": queueName}
					if !asJSON {
						fmt.Fprintf(out, "%s queue %s in every supervisor: every master applies it within a tick\n", a.verb, queueName)
					}
				case len(args) == 1:
					if err := checkSupervisor(cfg, args[0]); err != nil {
						return err
					}
					if err := a.supervisor(svc, ctx, args[0]); err != nil {
						return err
					}
					target = map[string]any{"supervisor": args[0]}
					if !asJSON {
						fmt.Fprintf(out, "%s supervisor %s: every master applies it within a tick\n", a.verb, args[0])
					}
				default:
					if err := a.supervisor(svc, ctx, ""); err != nil {
						return err
					}
					target = map[string]any{"all": true}
					if !asJSON {
						fmt.Fprintf(out, "%s every supervisor: every master applies it within a tick\n", a.verb)
					}
				}
				if asJSON {
					return printJSON(out, map[string]any{a.verb: target})
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&queueName, "queue", "", a.queueHelp)
	c.Flags().BoolVar(&asJSON, "json", false, "print what changed as JSON")
	return c
}

func (r *runner) pauseCommand() *cobra.Command {
	return r.pauseActionCommand(pauseAction{
		use:        "fleet:pause [SUPERVISOR] | --queue Q",
		short:      "Pause a supervisor (none: every supervisor) or one queue: running jobs finish, no new job starts",
		verb:       "paused",
		queueHelp:  "pause this queue in every supervisor that works it",
		queue:      (*fleet.Service).PauseQueue,
		supervisor: (*fleet.Service).Pause,
	})
}

func (r *runner) continueCommand() *cobra.Command {
	return r.pauseActionCommand(pauseAction{
		use:        "fleet:continue [SUPERVISOR] | --queue Q",
		short:      "Resume a paused supervisor (none: every supervisor) or queue",
		verb:       "continued",
		queueHelp:  "resume this queue",
		queue:      (*fleet.Service).ResumeQueue,
		supervisor: (*fleet.Service).Resume,
	})
}

// statusReport is what fleet:status --json prints.
type statusReport struct {
	Status  fleet.Status   `json:"status"`
	At      time.Time      `json:"at"`
	Masters []fleet.Master `json:"masters"`
	Paused  fleet.Paused   `json:"paused"`
	// CleanupHeld are the sessions that have held back the cleanup of
	// dead rows for longer than fleet.held_warn_secs.
	CleanupHeld []fleet.CleanupHolder `json:"cleanup_held"`
}

func (r *runner) statusCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "fleet:status [--json]",
		Short: "Print Running, Paused or Inactive, the live masters, what is paused and any transaction holding back cleanup; exit 1 when no master is live",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return r.withService(c.Context(), func(cfg *config.Config, svc *fleet.Service) error {
				v, err := svc.Masters(c.Context(), false)
				if err != nil {
					return err
				}
				p, err := svc.PausedState(c.Context())
				if err != nil {
					return err
				}
				held, err := svc.CleanupHolders(c.Context(), time.Duration(cfg.Fleet.HeldWarnSecs)*time.Second)
				if err != nil {
					return err
				}
				out := c.OutOrStdout()
				rep := statusReport{Status: fleet.StatusOf(v.Masters), At: v.At, Masters: v.Masters, Paused: p, CleanupHeld: held}
				if asJSON {
					if err := printJSON(out, rep); err != nil {
						return err
					}
				} else {
					fmt.Fprintln(out, rep.Status)
					for _, m := range v.Masters {
						fmt.Fprintf(out, "  %s  %s  pid %d  up %s  beat %.1fs ago\n", m.Name, m.State, m.PID,
							v.At.Sub(m.StartedAt).Round(time.Second), m.BeatAgeSecs)
					}
					printPaused(out, p)
					for _, h := range held {
						fmt.Fprintf(out, "cleanup held back for %s by pid %d (application %q, %s): %s\n",
							(time.Duration(h.AgeSecs) * time.Second).String(), h.PID, h.ApplicationName, h.State, h.Query)
					}
				}
				switch rep.Status {
				case fleet.StatusInactive:
					return &exitError{code: ExitFailure, err: errors.New("no fleet master is live")}
				case fleet.StatusPaused:
					// It said so on stdout: no error line.
					return &exitError{code: ExitPaused, err: errors.New("every live master is paused"), silent: true}
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (with the paused supervisors and queues); exit 1 when no master is live, as without it")
	return c
}

func (r *runner) terminateCommand() *cobra.Command {
	var asJSON, wait bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "fleet:terminate [--wait [--timeout 5m]] [--json]",
		Short: "Stop every running master gracefully (a master started afterwards keeps running)",
		Long: "Stop every running master gracefully; a master started afterwards keeps running. " +
			"With --wait, return once every master that was live is gone (exit 0), or exit 9 at --timeout with those still live.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usagef("--timeout must be positive, got %s", timeout)
			}
			return r.withStore(c.Context(), func(_ *config.Config, st *store.Store) error {
				svc := fleet.New(st.Pool(), fleet.Options{})
				v, err := svc.Masters(c.Context(), false)
				if err != nil {
					return err
				}
				if err := st.StateSet(c.Context(), store.StateTerminate); err != nil {
					return err
				}
				out := c.OutOrStdout()
				if !wait {
					if asJSON {
						return printJSON(out, map[string]any{"terminate": map[string]any{"requested": true, "live_masters": len(v.Masters)}})
					}
					fmt.Fprintf(out, "asked %d running master(s) to terminate; each stops its workers gracefully within a tick\n", len(v.Masters))
					return nil
				}
				if !asJSON {
					fmt.Fprintf(out, "asked %d running master(s) to terminate; waiting up to %s for them to stop\n", len(v.Masters), timeout)
				}
				left, err := waitForMasters(c.Context(), svc, v.Masters, timeout)
				if err != nil {
					return err
				}
				if asJSON {
					if err := printJSON(out, map[string]any{"terminate": map[string]any{"requested": true, "live_masters": len(v.Masters), "still_live": append([]string{}, left...)}}); err != nil {
						return err
					}
				} else if len(left) == 0 {
					fmt.Fprintf(out, "all %d master(s) stopped\n", len(v.Masters))
				}
				if len(left) > 0 {
					return &exitError{code: ExitTimedOut, err: fmt.Errorf("%d master(s) still live after %s: %s", len(left), timeout, strings.Join(left, ", "))}
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print what changed as JSON")
	c.Flags().BoolVar(&wait, "wait", false, "wait until every master that was live has stopped")
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "with --wait: how long to wait before giving up (exit 9)")
	return c
}

// terminatePoll is how often fleet:terminate --wait looks whether the
// masters have stopped.
const terminatePoll = 250 * time.Millisecond

// waitForMasters polls the membership until none of masters (those live
// when the terminate was asked) is live any more, or timeout passes. It
// returns the names of those still live.
func waitForMasters(ctx context.Context, svc *fleet.Service, masters []fleet.Master, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		v, err := svc.Masters(ctx, false)
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		var left []string
		if err == nil {
			live := map[string]bool{}
			for _, m := range v.Masters {
				live[m.Instance] = true
			}
			for _, m := range masters {
				if live[m.Instance] {
					left = append(left, m.Name)
				}
			}
			if len(left) == 0 {
				return nil, nil
			}
		} else {
			for _, m := range masters {
				left = append(left, m.Name)
			}
		}
		if backoff.Sleep(ctx, terminatePoll) != nil {
			if parent := context.Cause(ctx); parent != nil && !errors.Is(parent, context.DeadlineExceeded) {
				return nil, parent
			}
			return left, nil
		}
	}
}
