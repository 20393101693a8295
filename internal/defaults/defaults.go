// Package defaults is the one source of fleet's defaults: the
// configuration (config.Default) and every package's zero-value defaults
// (master.Settings, membership.Config, worker.Config) read them here, and
// a test checks that docs/configuration.md says the same.
package defaults

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"
)

// Jobs and workers.
const (
	// Concurrency is how many jobs a worker runs at once (queue.workers).
	Concurrency = 4
	// Tries is the most attempts of a job that sets none (queue.tries).
	Tries = 3
	// Timeout is how long an attempt may run when its job sets no
	// timeout (queue.timeout_secs).
	Timeout = 60 * time.Second
	// TimeoutGrace is how long a job may run past its cancel before its
	// worker gives up on it (queue.timeout_grace_secs).
	TimeoutGrace = 5 * time.Second
	// PollInterval is the workers' polling fallback beside LISTEN
	// (queue.poll_interval_ms).
	PollInterval = time.Second
	// PayloadBudget bounds the payload bytes a worker holds, claimed and
	// running (queue.payload_budget_bytes).
	PayloadBudget = 32 << 20
	// PrefetchHold is how long a prefetched job may wait for a slot
	// before its worker gives it back (queue.prefetch_hold_ms).
	PrefetchHold = 100 * time.Millisecond
)

// Backoff is the seconds before each retry of a job that sets none
// (queue.backoff); a fresh slice each call.
func Backoff() []int { return []int{1, 5, 30} }

// Masters and their membership.
const (
	// TTL is how long a master's row outlives its last beat
	// (fleet.master_ttl_secs).
	TTL = 10 * time.Second
	// BeatInterval is the time between two beats (fleet.beat_interval_ms).
	BeatInterval = time.Second
	// BalanceCooldown is the time between rebalancing steps
	// (fleet.balance_cooldown_secs).
	BalanceCooldown = 3 * time.Second
	// BalanceMaxShift is how far one group moves per step
	// (fleet.balance_max_shift).
	BalanceMaxShift = 1
	// Linger is how long a lingering master's last row lives
	// (fleet.linger_secs).
	Linger = 30 * time.Second
	// StartTimeout is how long a started worker may take to get ready
	// (fleet.start_timeout_secs).
	StartTimeout = 30 * time.Second
	// LongWaitCooldown is the least time between two long-wait alerts of
	// one queue (fleet.long_wait_cooldown_minutes).
	LongWaitCooldown = 15 * time.Minute
	// HeldWarn is how long a transaction may hold back the cleanup of
	// fleet's tables before its master warns (fleet.held_warn_secs).
	HeldWarn = time.Minute
)

// How long history is kept (fleet.trim).
const (
	CompletedHours = 24
	FailedDays     = 7
	MetricsDays    = 30
)

// Name is a process's default name in the fleet, host:pid:nonce with a
// nonce random per call: a master's name, and the lease-holder name of a
// worker run without a master.
func Name() string {
	host, _ := os.Hostname()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s:%d:%s", cmp.Or(host, "localhost"), os.Getpid(), hex.EncodeToString(b))
}
