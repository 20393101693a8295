package process

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// SupervisorOptions turns the fleet section into supervisor.Options;
// withOnly applies fleet.only (a master's own supervisors), without it
// every configured supervisor is there.
func SupervisorOptions(cfg *config.Config, withOnly bool) supervisor.Options {
	o := supervisor.Options{
		Supervisors:        map[string]supervisor.SupervisorOptions{},
		DefaultQueues:      cfg.Queue.Queues,
		DefaultQueue:       cfg.Queue.DefaultQueue,
		DefaultConcurrency: cfg.Queue.Workers,
		Driver:             cfg.Queue.Driver,
		CheckQueue:         func(q string) error { return queue.CheckQueue("the queue name", q) },
	}
	if withOnly {
		o.Only = cfg.Fleet.Only
	}
	for name, s := range cfg.Fleet.Supervisors {
		o.Supervisors[name] = supervisor.SupervisorOptions{
			Queues: s.Queues, Balance: s.Balance,
			MinProcesses: s.MinProcesses, MaxProcesses: s.MaxProcesses, Concurrency: s.Concurrency,
			FleetMaxProcesses: s.FleetMaxProcesses,
			MaxJobs:           s.MaxJobs, MaxMemoryMB: s.MaxMemoryMB, MaxTimeSecs: s.MaxTimeSecs,
			Tries: s.Tries, Backoff: s.Backoff, TimeoutSecs: s.TimeoutSecs,
			PayloadBudgetBytes: s.PayloadBudgetBytes,
		}
	}
	return o
}

// masterSettings turns the configuration into master settings.
func masterSettings(cfg *config.Config, sups []supervisor.Supervisor, version string) master.Settings {
	timeout := time.Duration(cfg.Queue.TimeoutSecs) * time.Second
	for _, s := range sups {
		timeout = max(timeout, s.Timeout)
	}
	return master.Settings{
		LongWait:         cfg.Fleet.LongWait,
		LongWaitCooldown: time.Duration(cfg.Fleet.LongWaitCooldownMinutes) * time.Minute,
		HeldWarn:         time.Duration(cfg.Fleet.HeldWarnSecs) * time.Second,
		Trim: store.TrimParams{
			CompletedHours: cfg.Fleet.Trim.CompletedHours,
			FailedDays:     cfg.Fleet.Trim.FailedDays,
			MetricsDays:    cfg.Fleet.Trim.MetricsDays,
		},
		BalanceCooldown: time.Duration(cfg.Fleet.BalanceCooldownSecs) * time.Second,
		BalanceMaxShift: cfg.Fleet.BalanceMaxShift,
		TTL:             time.Duration(cfg.Fleet.MasterTTLSecs) * time.Second,
		BeatInterval:    time.Duration(cfg.Fleet.BeatIntervalMs) * time.Millisecond,
		OnStop:          cfg.Fleet.OnStop,
		Linger:          time.Duration(cfg.Fleet.LingerSecs) * time.Second,
		StartTimeout:    time.Duration(cfg.Fleet.StartTimeoutSecs) * time.Second,
		DefaultTries:    cfg.Queue.Tries,
		DefaultTimeout:  timeout,
		TimeoutGrace:    time.Duration(cfg.Queue.TimeoutGraceSecs) * time.Second,
		Version:         version,
	}
}

// ConnectionBudget is the most connections the master and its workers
// open (see supervisor.ConnectionBudget), from database.max_conns and
// fleet.max_connections.
func ConnectionBudget(cfg *config.Config, sups []supervisor.Supervisor) (supervisor.Budget, error) {
	return supervisor.ConnectionBudget(sups, budgetOptions(cfg))
}

// budgetOptions are the options of cfg's connection budget.
func budgetOptions(cfg *config.Config) supervisor.BudgetOptions {
	return supervisor.BudgetOptions{
		Pool: cfg.Database.MaxConns, Cap: cfg.Fleet.MaxConnections,
		Dashboard: cfg.Fleet.HTTP.Addr != "" && cfg.Fleet.Dashboard,
	}
}

// MasterName is fleet.name, else the variable fleet.name_env names (looked
// up with getenv, in the app's environment), else empty (the master's
// default, host:pid:nonce).
func MasterName(cfg *config.Config, getenv func(string) string) string {
	if cfg.Fleet.Name != "" {
		return cfg.Fleet.Name
	}
	if cfg.Fleet.NameEnv != "" {
		return getenv(cfg.Fleet.NameEnv)
	}
	return ""
}

// checkNameEnv checks the master name read from the variable
// fleet.name_env names, as config checks fleet.name: at most
// config.MaxMasterNameBytes, no tab, newline or brace. An overlong value
// is cut in the message.
func checkNameEnv(cfg *config.Config, getenv func(string) string) error {
	if cfg.Fleet.Name != "" || cfg.Fleet.NameEnv == "" {
		return nil
	}
	v := getenv(cfg.Fleet.NameEnv)
	shown := v
	if len(shown) > 64 {
		shown = strings.ToValidUTF8(shown[:64], "") + "…"
	}
	switch {
	case len(v) > config.MaxMasterNameBytes:
		return fmt.Errorf("fleet.name_env: $%s must be at most %d bytes, got %d bytes (%q)", cfg.Fleet.NameEnv, config.MaxMasterNameBytes, len(v), shown)
	case strings.ContainsAny(v, "\t\n\r{}"):
		return fmt.Errorf("fleet.name_env: $%s must hold no tab, newline or brace, got %q", cfg.Fleet.NameEnv, shown)
	}
	return nil
}

// MasterOptions is what a master is built from, besides its store,
// supervisors and spawner.
type MasterOptions struct {
	// Config is the app's configuration.
	Config *config.Config
	// Name is the master's name; empty is the master's default
	// (master.DefaultName). RunMaster settles it itself when it is empty,
	// from MasterName.
	Name string
	// Getenv looks a variable up in the app's environment: the one
	// fleet.name_env names. Nil looks nothing up.
	Getenv func(string) string
	// Version is the app's version, as the master's row shows it.
	Version string
	// Logger is the process's logger.
	Logger *slog.Logger
	// OnLongWait is the app's own long-wait listener (nil: none); the
	// webhook of fleet.long_wait_webhook is called beside it.
	OnLongWait func(context.Context, fleet.LongWaitDetected)
	// Periodic are the app's periodic schedules, of the configuration and
	// of its code.
	Periodic []periodic.Schedule
	// Budget, when set, is the connection budget already fitted to the
	// server (RunMaster reads the server's room first); nil: the budget of
	// the configuration alone (ConnectionBudget).
	Budget *supervisor.Budget
}

func (o MasterOptions) getenv(key string) string {
	if o.Getenv == nil {
		return ""
	}
	return o.Getenv(key)
}

// budget is o.Budget, else the budget of the configuration for sups.
func (o MasterOptions) budget(sups []supervisor.Supervisor) (supervisor.Budget, error) {
	if o.Budget != nil {
		return *o.Budget, nil
	}
	return ConnectionBudget(o.Config, sups)
}

// BuildMaster builds the master the configuration describes over st, sups
// and sp, with the app's long-wait listeners, and returns it with its
// settings. The fleet command (RunMaster), the demo and the bench share it.
func BuildMaster(st *store.Store, sups []supervisor.Supervisor, sp spawner.Spawner, o MasterOptions) (*master.Master, master.Settings, error) {
	cfg := o.Config
	if err := checkNameEnv(cfg, o.getenv); err != nil {
		return nil, master.Settings{}, err
	}
	settings := masterSettings(cfg, sups, o.Version)
	settings.Name = o.Name
	budget, err := o.budget(sups)
	if err != nil {
		return nil, settings, err
	}
	settings.Connections = budget
	settings.Logger = o.Logger
	onLongWait, err := longWaitListeners(cfg, o.OnLongWait, settings.Logger)
	if err != nil {
		return nil, settings, err
	}
	settings.OnLongWait = onLongWait
	settings.Periodic = o.Periodic
	m, err := master.New(st, sups, master.WithSpawner(sp), master.WithSettings(settings))
	return m, settings, err
}

// longWaitListeners combines the app's listener and the configured webhook
// into the master's OnLongWait (nil when there is neither).
func longWaitListeners(cfg *config.Config, app func(context.Context, fleet.LongWaitDetected), log *slog.Logger) (func(context.Context, fleet.LongWaitDetected), error) {
	var listeners []func(context.Context, fleet.LongWaitDetected)
	if app != nil {
		listeners = append(listeners, app)
	}
	if cfg.Fleet.LongWaitWebhook != "" {
		hook, err := fleet.WebhookNotifier(cfg.Fleet.LongWaitWebhook, nil, log)
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, hook)
	}
	if len(listeners) == 0 {
		return nil, nil
	}
	return func(ctx context.Context, e fleet.LongWaitDetected) {
		for _, l := range listeners {
			l(ctx, e)
		}
	}, nil
}
