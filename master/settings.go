package master

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/fleet-go/fleet/internal/defaults"
	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// On-stop behaviours of a master's row (fleet.on_stop).
const (
	// OnStopLeave deletes the row once the children are gone.
	OnStopLeave = "leave"
	// OnStopLinger writes one last draining row that lives Linger.
	OnStopLinger = "linger"
)

// Settings tune the master. Zero fields take the defaults below.
type Settings struct {
	// Tick is how often supervision, housekeeping, shared state and duties
	// run (default 1 s).
	Tick time.Duration
	// BeatInterval is the time between beats (default Tick); it must be
	// below half the TTL.
	BeatInterval time.Duration
	// BalanceCooldown is the time between rebalancing steps (default 3 s).
	BalanceCooldown time.Duration
	// BalanceMaxShift is how far one group moves per step (default 1).
	BalanceMaxShift int
	// TTL is how long the master's row outlives its last beat (default
	// 10 s). Another master releases the jobs of a master whose row
	// expired.
	TTL time.Duration
	// OnStop is OnStopLeave (default) or OnStopLinger.
	OnStop string
	// Linger is how long the last row lives with OnStopLinger (default
	// 30 s).
	Linger time.Duration
	// StartTimeout is how long a started worker may take to report ready
	// before it is killed and replaced (a crash, with backoff); default
	// 30 s. It is applied only while this master's own beats have held for
	// a ttl: a worker waiting for an unreachable database is not stuck.
	StartTimeout time.Duration
	// Connections is the fleet's connection budget (see
	// supervisor.ConnectionBudget): each worker is started with its pool
	// size, and under a cap (Limit above 0) the master keeps at most Limit
	// processes at once, those finishing their jobs included. The budget
	// is shown in the master's row (fleet:masters). Zero: none.
	Connections supervisor.Budget
	// StopTimeout is how long shutdown waits for workers to finish their
	// running jobs before killing them (default: DefaultTimeout + twice
	// TimeoutGrace + 5 s: a job ignoring its timeout is given up on after
	// the grace, and the jobs beside it then have the grace to finish
	// before their worker interrupts them and exits).
	StopTimeout time.Duration
	// RestartBase and RestartMax bound the delay before restarting a
	// crashed group (default 1 s doubling to 60 s).
	RestartBase, RestartMax time.Duration
	// DefaultTries is the tries of lost jobs that set none (default 3).
	DefaultTries int
	// DefaultTimeout and TimeoutGrace decide when a worker holding a job
	// is overdue and killed (defaults 60 s and 5 s; a few seconds of slack
	// are added so the worker's own watchdog acts first).
	DefaultTimeout, TimeoutGrace time.Duration
	// Name is the master's name in fleet_masters (default host:pid:nonce).
	// Several instances may share a name; each is told apart by its
	// random instance id.
	Name string
	// Version is reported in its row (default "dev").
	Version string
	// Logger receives the master's logs, under logger=fleet.
	Logger *slog.Logger
	// Now is the master's clock (default time.Now): of the restart
	// backoff, the balance cooldown, the start timeout, the jobs-per-minute
	// rate, the waits between the duties' and the periodic service's
	// reads, and the minute sweep. Liveness never uses it: it is measured
	// on the database clock. The duties' periods and the snapshots'
	// minutes are the store's clock (the database's, unless a test gave
	// the store one: see store.Store.WithClock).
	Now func() time.Time
	// LongWait maps a queue to the wait, in seconds, that raises
	// OnLongWait (0 or absent: off).
	LongWait map[string]int
	// LongWaitCooldown is the least time between two alerts of one queue
	// across the fleet (default 15 minutes).
	LongWaitCooldown time.Duration
	// OnLongWait receives long-wait alerts, one at a time, from a goroutine
	// of the master's.
	OnLongWait func(context.Context, model.LongWaitDetected)
	// Trim says how long history is kept (defaults 24 h completed, 7 days
	// failed, 30 days metrics). The ticks recorded for periodic schedules
	// are kept as long as completed attempts.
	Trim store.TrimParams
	// Periodic are the schedules the master dispatches, each tick once
	// across every master running them.
	Periodic []periodic.Schedule
	// PeriodicGrace is how late a tick may be and still be on time
	// (default TTL): a tick no master dispatched within it was missed,
	// and its schedule's catch-up decides.
	PeriodicGrace time.Duration
	// HeldWarn is how long a session may hold back the cleanup of the
	// database's dead rows before the master warns, naming it, at most
	// once every HeldWarnEvery (default 1 minute: fleet.held_warn_secs).
	HeldWarn time.Duration
	// HeldCheck is how often the master looks for such a session (default
	// 10 s, at most HeldWarn).
	HeldCheck time.Duration
	// HeldWarnEvery is the least time between two such warnings of the
	// master (default 1 minute).
	HeldWarnEvery time.Duration
}

func (s Settings) withDefaults() Settings {
	s.Tick = cmp.Or(s.Tick, defaults.BeatInterval)
	s.BeatInterval = cmp.Or(s.BeatInterval, s.Tick)
	s.BalanceCooldown = cmp.Or(s.BalanceCooldown, defaults.BalanceCooldown)
	s.BalanceMaxShift = cmp.Or(s.BalanceMaxShift, defaults.BalanceMaxShift)
	s.TTL = cmp.Or(s.TTL, defaults.TTL)
	s.OnStop = cmp.Or(s.OnStop, OnStopLeave)
	s.Linger = cmp.Or(s.Linger, defaults.Linger)
	s.RestartBase = cmp.Or(s.RestartBase, time.Second)
	s.RestartMax = cmp.Or(s.RestartMax, time.Minute)
	s.DefaultTries = cmp.Or(s.DefaultTries, defaults.Tries)
	s.DefaultTimeout = cmp.Or(s.DefaultTimeout, defaults.Timeout)
	s.TimeoutGrace = cmp.Or(s.TimeoutGrace, defaults.TimeoutGrace)
	s.StopTimeout = cmp.Or(s.StopTimeout, s.DefaultTimeout+2*s.TimeoutGrace+5*time.Second)
	s.StartTimeout = cmp.Or(s.StartTimeout, defaults.StartTimeout)
	s.Version = cmp.Or(s.Version, "dev")
	s.LongWaitCooldown = cmp.Or(s.LongWaitCooldown, defaults.LongWaitCooldown)
	s.Trim.CompletedHours = cmp.Or(s.Trim.CompletedHours, defaults.CompletedHours)
	s.Trim.FailedDays = cmp.Or(s.Trim.FailedDays, defaults.FailedDays)
	s.Trim.MetricsDays = cmp.Or(s.Trim.MetricsDays, defaults.MetricsDays)
	s.PeriodicGrace = cmp.Or(s.PeriodicGrace, s.TTL)
	s.HeldWarn = cmp.Or(s.HeldWarn, defaults.HeldWarn)
	s.HeldCheck = min(cmp.Or(s.HeldCheck, heldCheck), s.HeldWarn)
	s.HeldWarnEvery = cmp.Or(s.HeldWarnEvery, time.Minute)
	if s.Name == "" {
		s.Name = DefaultName()
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return s
}

// DefaultName is host:pid:nonce, the nonce random per call.
func DefaultName() string { return defaults.Name() }
