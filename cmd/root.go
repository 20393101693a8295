// Package cmd holds the application's commands (cobra) and the glue that
// turns configuration into running parts. It is the only package that knows
// cobra; an app's main calls Execute.
//
// Of the services of a running master it holds one, the HTTP listener
// (httpServer: /metrics, /healthz, /readyz, the dashboard), with the
// master's lifecycle; it starts before the master's own (package master)
// and stops after them.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/bench"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/process"
	"github.com/fleet-go/fleet/queue"
)

// App is what an application hands to Execute.
type App struct {
	// Jobs holds the application's job handlers, and the periodic jobs it
	// declares in Go (queue.Registry.Periodic).
	Jobs *queue.Registry
	// Version is the app's version: `app version` and `app --version`
	// print it (default: the main module's version and VCS revision from
	// the build information), and masters and hand-run workers report
	// the same on one line.
	Version string
	// Stdin, Stdout and Stderr default to the process's own.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Args default to os.Args[1:].
	Args []string
	// Environ defaults to os.Environ().
	Environ []string
	// Dir is the working directory; default the process's own.
	Dir string
	// Commands returns the application's own subcommands, added beside
	// fleet's (migrate, dispatch, fleet, ...). It is called once per
	// Execute, so each run gets fresh commands and flags. A command whose
	// name or alias is one of fleet's is refused. The commands inherit the
	// persistent --config flag and ExecuteContext's context
	// (cmd.Context()); their output goes to Stdout and Stderr.
	Commands func() []*cobra.Command
	// OnLongWait receives the long-wait alerts the fleet master raises
	// ([fleet.long_wait]); nil: alerts are only logged (and posted to
	// fleet.long_wait_webhook when set).
	OnLongWait func(context.Context, fleet.LongWaitDetected)
}

// Execute runs the command line and returns the process exit status. Errors
// are printed as one line on stderr, never with a stack trace.
func Execute(app App) int {
	return ExecuteContext(context.Background(), app)
}

// ExecuteContext is Execute with a context.
func ExecuteContext(ctx context.Context, app App) int {
	if app.Jobs == nil {
		app.Jobs = queue.NewRegistry()
	}
	version := versionInfo(app.Version)
	if app.Stdin == nil {
		app.Stdin = os.Stdin
	}
	if app.Stdout == nil {
		app.Stdout = os.Stdout
	}
	if app.Stderr == nil {
		app.Stderr = os.Stderr
	}
	if app.Args == nil {
		app.Args = os.Args[1:]
	}
	if app.Environ == nil {
		app.Environ = os.Environ()
	}
	r := &runner{app: app, version: version}
	// A process the bench started (a master, fleet:work) runs the bench's
	// jobs; no other process has their handler.
	if r.getenv(bench.EnvRun) != "" {
		bench.Register(app.Jobs)
		bench.RegisterStamp(app.Jobs, r.getenv(bench.EnvStamps))
	}
	root := r.rootCommand()
	appCommands, err := addAppCommands(root, app.Commands)
	if err != nil {
		fmt.Fprintf(app.Stderr, "error: %s\n", oneLine(err.Error()))
		return 1
	}
	started := markStarted(root)
	root.SetArgs(app.Args)
	root.SetOut(app.Stdout)
	root.SetErr(app.Stderr)
	ran, err := root.ExecuteContextC(ctx)
	if err != nil && !*started {
		// cobra refused the command line before any command ran: an
		// unknown command or flag, a wrong number of arguments, a
		// required flag missing.
		err = &usageError{err: err}
	}
	err = process.ExplainRefused(explainDatabaseError(err, !appCommands.ran(ran)))
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.silent {
		return ee.code
	}
	fmt.Fprintf(app.Stderr, "error: %s\n", oneLine(err.Error()))
	return exitCode(err)
}

// markStarted wraps the Run and RunE of root and every command below it
// so that the flag returned is set once one of them starts (or a pre-run
// hook fails): an error returned while it is unset came from cobra's own
// checks of the command line.
func markStarted(root *cobra.Command) *bool {
	started := new(bool)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if run := c.RunE; run != nil {
			c.RunE = func(c *cobra.Command, args []string) error {
				*started = true
				return run(c, args)
			}
		}
		if run := c.Run; run != nil {
			c.Run = func(c *cobra.Command, args []string) {
				*started = true
				run(c, args)
			}
		}
		// A pre-run hook's error is the command's own, not cobra's.
		for _, hook := range []*func(*cobra.Command, []string) error{&c.PersistentPreRunE, &c.PreRunE} {
			if run := *hook; run != nil {
				*hook = func(c *cobra.Command, args []string) error {
					err := run(c, args)
					if err != nil {
						*started = true
					}
					return err
				}
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return started
}

// appCommands are the commands an app added (cmd.App.Commands).
type appCommands map[*cobra.Command]bool

// ran reports whether c is one of the app's commands or below one.
func (a appCommands) ran(c *cobra.Command) bool {
	for ; c != nil; c = c.Parent() {
		if a[c] {
			return true
		}
	}
	return false
}

// addAppCommands adds the app's own commands to root, refusing one that
// would shadow a command of fleet's (or of another of the app's).
func addAppCommands(root *cobra.Command, commands func() []*cobra.Command) (appCommands, error) {
	if commands == nil {
		return nil, nil
	}
	taken := map[string]bool{"help": true, "completion": true}
	for _, c := range root.Commands() {
		taken[c.Name()] = true
		for _, a := range c.Aliases {
			taken[a] = true
		}
	}
	added := appCommands{}
	for _, c := range commands() {
		if c == nil {
			continue
		}
		for _, name := range append([]string{c.Name()}, c.Aliases...) {
			if taken[name] {
				return nil, fmt.Errorf("cmd.App.Commands: command %q is already taken by fleet or another app command", name)
			}
			taken[name] = true
		}
		root.AddCommand(c)
		added[c] = true
	}
	return added, nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// runner carries the app and the flags every command shares.
type runner struct {
	app        App
	version    VersionInfo
	configPath string
}

func (r *runner) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "app",
		Short:         "Queue workers on PostgreSQL, supervised by a fleet master",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       r.version.App,
	}
	root.SetVersionTemplate(r.version.String())
	root.PersistentFlags().StringVar(&r.configPath, "config", "", "config file (default config/app.toml, or $APP_CONFIG)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())
	})
	root.AddCommand(
		r.migrateCommand(),
		r.dispatchCommand(),
		r.workCommand(),
		r.demoCommand(),
		r.fleetCommand(),
		r.pauseCommand(),
		r.continueCommand(),
		r.statusCommand(),
		r.terminateCommand(),
		r.workloadCommand(),
		r.mastersCommand(),
		r.supervisorsCommand(),
		r.failedCommand(),
		r.retryCommand(),
		r.forgetCommand(),
		r.clearCommand(),
		r.trimCommand(),
		r.cancelCommand(),
		r.jobsCommand(),
		r.jobCommand(),
		r.metricsCommand(),
		r.tokenCommand(),
		r.periodicCommand(),
		r.benchCommand(),
		r.versionCommand(r.version),
	)
	r.completeNames(root)
	return root
}

// loadConfig reads the configuration the way every command does.
func (r *runner) loadConfig() (*config.Config, error) {
	return config.Load(config.Options{Path: r.configPath, Dir: r.app.Dir, Environ: r.app.Environ})
}

// logger builds the process's logger from the log section and, when it
// writes to the process's stderr, makes it slog's default.
func (r *runner) logger(cfg *config.Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	var log *slog.Logger
	if cfg.Log.Format == "json" {
		log = slog.New(slog.NewJSONHandler(r.app.Stderr, opts))
	} else {
		log = slog.New(slog.NewTextHandler(r.app.Stderr, opts))
	}
	// The app's own handlers and listeners log through slog's default:
	// give them the configured format and level too.
	if r.app.Stderr == os.Stderr {
		slog.SetDefault(log)
	}
	return log
}
