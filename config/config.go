// Package config loads the application's configuration: defaults, then the
// TOML file (config/app.toml by default), then a .env file in the working
// directory, then APP_* environment variables. Every error names the file,
// line or variable and the key at fault.
package config

import (
	"time"

	"github.com/fleet-go/fleet/internal/defaults"
)

// Config is the whole application configuration.
type Config struct {
	Database DatabaseConfig `toml:"database"`
	Queue    QueueConfig    `toml:"queue"`
	Log      LogConfig      `toml:"log"`
	Fleet    FleetConfig    `toml:"fleet"`
}

// DatabaseConfig names the PostgreSQL database.
type DatabaseConfig struct {
	// URL is a postgres:// connection string. Empty means "not configured":
	// the demo command then starts a private server.
	URL string `toml:"url"`
	// MaxConns is the size of the connection pool of each process of the
	// fleet: the master's and every worker's (which also opens one
	// connection for LISTEN). 0: 4 for the master, 3 for a worker. At
	// least 2 when set. fleet.max_connections, and the server's room
	// (ReserveConnections), may shrink it.
	MaxConns int `toml:"max_conns"`
	// ReserveConnections is how many of the server's connections fleet
	// leaves free for the application: a master (or a worker) reads the
	// server's max_connections, its reserved slots and the sessions open
	// as it starts, and shrinks its pools, then runs fewer processes, so
	// that this many stay free (see supervisor.FitServer). Unset: a tenth
	// of max_connections, at least 3. Not read behind a pooler.
	ReserveConnections *int `toml:"reserve_connections"`
	// Pooler says what URL goes through: PoolerNone (PostgreSQL itself),
	// PoolerSession or PoolerTransaction (a pooler such as PgBouncer in
	// that pool mode). Under a transaction pooler fleet prepares no
	// statement on the server and keeps no state in a session.
	Pooler string `toml:"pooler"`
	// DirectURL, when set, is a connection to the same database that
	// bypasses the pooler: app migrate runs on it (it takes session
	// advisory locks), and workers LISTEN on it. Under a transaction
	// pooler without it, workers poll.
	DirectURL string `toml:"direct_url"`
}

// The values of database.pooler.
const (
	PoolerNone        = "none"
	PoolerSession     = "session"
	PoolerTransaction = "transaction"
)

// QueueConfig holds the queue's defaults.
type QueueConfig struct {
	// Driver is "database" (PostgreSQL) or "memory" (unit tests only).
	Driver string `toml:"driver"`
	// DefaultQueue is the queue a job goes to when it names none.
	DefaultQueue string `toml:"default_queue"`
	// Queues is the list a worker works when no supervisor is configured.
	Queues []string `toml:"queues"`
	// Workers is the default number of jobs one worker process runs at once.
	Workers int `toml:"workers"`
	// Tries is the default maximum number of attempts of a job.
	Tries int `toml:"tries"`
	// Backoff is the default delay before each retry, in seconds; the last
	// value repeats.
	Backoff []int `toml:"backoff"`
	// TimeoutSecs is the default time a job may run before its context is
	// cancelled.
	TimeoutSecs int `toml:"timeout_secs"`
	// TimeoutGraceSecs is how long a worker waits after cancelling a timed-out
	// job before it gives up on it and exits.
	TimeoutGraceSecs int `toml:"timeout_grace_secs"`
	// PollIntervalMs is the polling fallback when no notification arrives.
	PollIntervalMs int `toml:"poll_interval_ms"`
	// PrefetchHoldMs is how long a job a worker claimed ahead of a free
	// slot (its prefetch) may wait for one before the worker gives it back
	// for another worker to take.
	PrefetchHoldMs int `toml:"prefetch_hold_ms"`
	// MaxPayloadBytes is the largest job payload a dispatch accepts, in
	// bytes of JSON.
	MaxPayloadBytes int `toml:"max_payload_bytes"`
	// PayloadBudgetBytes bounds the payload bytes one worker process holds,
	// its claimed and running jobs together (see worker.Config.
	// PayloadBudget); 0: no bound but the slots.
	PayloadBudgetBytes int `toml:"payload_budget_bytes"`
	// Limits maps job-name patterns (path.Match syntax, e.g. "exports.*")
	// to a concurrency limit: jobs whose name matches, and which set no
	// limit of their own, share the limit key "name:" + pattern and run at
	// most that many at once across the fleet (see queue.Defaults.Limits).
	Limits map[string]int `toml:"limits"`
}

// MaxMasterNameBytes is the longest fleet.name, in bytes: the name is the
// key of the master's row and appears in every log line and worker id.
const MaxMasterNameBytes = 200

// MaxLimitPatternBytes is the longest pattern of queue.limits, in bytes:
// its limit key, "name:" + pattern, must fit queue.MaxLimitKeyBytes (200).
const MaxLimitPatternBytes = 195

// LogConfig shapes the process's logs.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `toml:"level"`
	// Format is text or json.
	Format string `toml:"format"`
	// Redact lists fragments of payload field names whose values are hidden.
	Redact []string `toml:"redact"`
}

// FleetConfig is the fleet master's section.
type FleetConfig struct {
	// Only restricts this host's master to the named supervisors.
	Only []string `toml:"only"`
	// Supervisors maps a supervisor's name to its options.
	Supervisors map[string]SupervisorConfig `toml:"supervisors"`
	// BalanceCooldownSecs is the time between two rebalancing steps.
	BalanceCooldownSecs int `toml:"balance_cooldown_secs"`
	// BalanceMaxShift is how far one queue's process count moves per step.
	BalanceMaxShift int `toml:"balance_max_shift"`
	// MasterTTLSecs is how long a master's row lives after its last beat.
	MasterTTLSecs int `toml:"master_ttl_secs"`
	// BeatIntervalMs is the time between two beats of a master; it must be
	// below half of master_ttl_secs.
	BeatIntervalMs int `toml:"beat_interval_ms"`
	// OnStop is "leave" (delete the row once the children are gone) or
	// "linger" (one last draining row that lives linger_secs).
	OnStop string `toml:"on_stop"`
	// LingerSecs is how long the last row lives with on_stop = "linger".
	LingerSecs int `toml:"linger_secs"`
	// StartTimeoutSecs is how long a started worker may take to report
	// ready before its master kills it and starts another.
	StartTimeoutSecs int `toml:"start_timeout_secs"`
	// MaxConnections caps the connections one master's fleet opens (the
	// master and all of its workers), so that the application keeps its
	// own; the pools shrink to fit (0: no cap).
	MaxConnections int `toml:"max_connections"`
	// Name is the master's name (default host:pid:nonce).
	Name string `toml:"name"`
	// NameEnv names an environment variable holding the master's name
	// (e.g. a pod name); it is used when Name is empty.
	NameEnv string `toml:"name_env"`
	// LongWait maps a queue to the wait, in seconds, that raises an alert.
	LongWait map[string]int `toml:"long_wait"`
	// LongWaitCooldownMinutes is the least time between two alerts of a queue.
	LongWaitCooldownMinutes int `toml:"long_wait_cooldown_minutes"`
	// LongWaitWebhook, when set, receives each long-wait alert as JSON.
	LongWaitWebhook string `toml:"long_wait_webhook"`
	// HeldWarnSecs is how long a transaction of another session may hold
	// back the cleanup of the database's dead rows (fleet's among them)
	// before the master warns, naming it, at most once a minute; it is
	// also the age from which fleet:status and
	// fleet_cleanup_holder_seconds show such a session.
	HeldWarnSecs int `toml:"held_warn_secs"`
	// Trim says how long history is kept.
	Trim TrimConfig `toml:"trim"`
	// Timescale is "auto" or "off": with auto, app migrate puts the history
	// and snapshot tables (fleet_jobs, fleet_metrics) on TimescaleDB
	// hypertables when the timescaledb extension is installed in the
	// database, else on native partitions; with off, on native partitions
	// whatever is installed. app migrate converts a database whose tables
	// are in the other layout.
	Timescale string `toml:"timescale"`
	// HTTP is the master's listener for /metrics and the dashboard.
	HTTP HTTPConfig `toml:"http"`
	// Path is where the dashboard is served.
	Path string `toml:"path"`
	// Dashboard turns the dashboard on or off.
	Dashboard bool `toml:"dashboard"`
	// Periodic maps a schedule's name to the job it dispatches and when.
	Periodic map[string]PeriodicConfig `toml:"periodic"`
}

// PeriodicConfig is one [fleet.periodic.NAME] table: a job every master
// of the fleet dispatches on a schedule, once per tick across them all.
type PeriodicConfig struct {
	// Cron is the schedule: five fields (minute hour day-of-month month
	// day-of-week) or a descriptor (@hourly, @daily, @every 30s, ...).
	Cron string `toml:"cron"`
	// Job is the name of the job dispatched at each tick; it must have a
	// handler in the app's registry.
	Job string `toml:"job"`
	// Queue is the job's queue (default queue.default_queue).
	Queue string `toml:"queue"`
	// Payload is the job's payload as a JSON string (default {}).
	Payload string `toml:"payload"`
	// TickKey, when set, adds the tick's time (RFC 3339, in Timezone) to
	// the payload, which must then be a JSON object, under this key.
	TickKey string `toml:"tick_key"`
	// Timezone is the IANA time zone the expression is read in (default
	// UTC).
	Timezone string `toml:"timezone"`
	// CatchUp is none (default), last or all: what becomes of ticks missed
	// while no master ran.
	CatchUp string `toml:"catch_up"`
	// CatchUpMax caps the missed ticks catch_up = "all" dispatches (1 to
	// 1000, default 10).
	CatchUpMax *int `toml:"catch_up_max"`
}

// SupervisorConfig is one [fleet.supervisors.NAME] table. Pointer fields are
// nil when the key is absent, so resolution can tell "unset" from zero.
type SupervisorConfig struct {
	Queues       []string `toml:"queues"`
	Balance      string   `toml:"balance"`
	MinProcesses *int     `toml:"min_processes"`
	MaxProcesses *int     `toml:"max_processes"`
	// FleetMaxProcesses caps the supervisor's processes summed over every
	// master that runs it.
	FleetMaxProcesses *int  `toml:"fleet_max_processes"`
	Concurrency       *int  `toml:"concurrency"`
	MaxJobs           int   `toml:"max_jobs"`
	MaxMemoryMB       int   `toml:"max_memory_mb"`
	MaxTimeSecs       int   `toml:"max_time_secs"`
	Tries             *int  `toml:"tries"`
	Backoff           []int `toml:"backoff"`
	TimeoutSecs       *int  `toml:"timeout_secs"`
	// PayloadBudgetBytes overrides queue.payload_budget_bytes for the
	// supervisor's processes (0: no bound).
	PayloadBudgetBytes *int `toml:"payload_budget_bytes"`
}

// The values of fleet.timescale.
const (
	TimescaleAuto = "auto"
	TimescaleOff  = "off"
)

// TrimConfig says how long job history and metrics are kept.
type TrimConfig struct {
	CompletedHours int `toml:"completed_hours"`
	FailedDays     int `toml:"failed_days"`
	MetricsDays    int `toml:"metrics_days"`
}

// HTTPConfig is the master's HTTP listener.
type HTTPConfig struct {
	// Addr is host:port; empty turns the listener off.
	Addr string `toml:"addr"`
}

// Default returns the configuration used when nothing overrides it.
func Default() Config {
	return Config{
		Database: DatabaseConfig{Pooler: PoolerNone},
		Queue: QueueConfig{
			Driver:             "database",
			DefaultQueue:       "default",
			Queues:             []string{"default"},
			Workers:            defaults.Concurrency,
			Tries:              defaults.Tries,
			Backoff:            defaults.Backoff(),
			TimeoutSecs:        int(defaults.Timeout / time.Second),
			TimeoutGraceSecs:   int(defaults.TimeoutGrace / time.Second),
			PollIntervalMs:     int(defaults.PollInterval / time.Millisecond),
			PrefetchHoldMs:     int(defaults.PrefetchHold / time.Millisecond),
			MaxPayloadBytes:    1 << 20,
			PayloadBudgetBytes: defaults.PayloadBudget,
		},
		Log: LogConfig{
			Level:  "info",
			Format: "text",
			Redact: []string{"password", "secret", "token", "authorization", "api_key"},
		},
		Fleet: FleetConfig{
			BalanceCooldownSecs:     int(defaults.BalanceCooldown / time.Second),
			BalanceMaxShift:         defaults.BalanceMaxShift,
			MasterTTLSecs:           int(defaults.TTL / time.Second),
			BeatIntervalMs:          int(defaults.BeatInterval / time.Millisecond),
			OnStop:                  "leave",
			LingerSecs:              int(defaults.Linger / time.Second),
			StartTimeoutSecs:        int(defaults.StartTimeout / time.Second),
			LongWaitCooldownMinutes: int(defaults.LongWaitCooldown / time.Minute),
			HeldWarnSecs:            int(defaults.HeldWarn / time.Second),
			Trim:                    TrimConfig{CompletedHours: defaults.CompletedHours, FailedDays: defaults.FailedDays, MetricsDays: defaults.MetricsDays},
			Timescale:               TimescaleAuto,
			HTTP:                    HTTPConfig{Addr: "127.0.0.1:9465"},
			Path:                    "/_fleet",
			Dashboard:               true,
		},
	}
}
