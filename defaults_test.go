package fleet_test

import (
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/internal/defaults"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/worker"
)

// The configuration's defaults are the packages' own zero-value defaults
// (both read internal/defaults), and TestConfigurationTable holds the
// docs to the configuration: one value, said three ways.
func TestDefaultsAgree(t *testing.T) {
	c := config.Default()
	secs := func(d time.Duration) int { return int(d / time.Second) }
	for _, tc := range []struct {
		key       string
		got, want int
	}{
		{"queue.workers", c.Queue.Workers, worker.DefaultConcurrency},
		{"queue.tries", c.Queue.Tries, worker.DefaultTries},
		{"queue.timeout_secs", c.Queue.TimeoutSecs, secs(worker.DefaultTimeout)},
		{"queue.timeout_grace_secs", c.Queue.TimeoutGraceSecs, secs(worker.DefaultTimeoutGrace)},
		{"queue.poll_interval_ms", c.Queue.PollIntervalMs, int(worker.DefaultPollInterval / time.Millisecond)},
		{"queue.prefetch_hold_ms", c.Queue.PrefetchHoldMs, int(worker.DefaultPrefetchHold / time.Millisecond)},
		{"fleet.master_ttl_secs", c.Fleet.MasterTTLSecs, secs(defaults.TTL)},
		{"fleet.beat_interval_ms", c.Fleet.BeatIntervalMs, int(defaults.BeatInterval / time.Millisecond)},
		{"fleet.balance_cooldown_secs", c.Fleet.BalanceCooldownSecs, secs(defaults.BalanceCooldown)},
		{"fleet.balance_max_shift", c.Fleet.BalanceMaxShift, defaults.BalanceMaxShift},
		{"fleet.linger_secs", c.Fleet.LingerSecs, secs(defaults.Linger)},
		{"fleet.start_timeout_secs", c.Fleet.StartTimeoutSecs, secs(defaults.StartTimeout)},
		{"fleet.long_wait_cooldown_minutes", c.Fleet.LongWaitCooldownMinutes, int(defaults.LongWaitCooldown / time.Minute)},
		{"fleet.trim.completed_hours", c.Fleet.Trim.CompletedHours, defaults.CompletedHours},
		{"fleet.trim.failed_days", c.Fleet.Trim.FailedDays, defaults.FailedDays},
		{"fleet.trim.metrics_days", c.Fleet.Trim.MetricsDays, defaults.MetricsDays},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: the configuration's default is %d, the packages' %d", tc.key, tc.got, tc.want)
		}
	}
	if !slices.Equal(c.Queue.Backoff, defaults.Backoff()) {
		t.Errorf("queue.backoff: %v, want %v", c.Queue.Backoff, defaults.Backoff())
	}
	// One default name, of one form, for masters and hand-run workers.
	if m, w := master.DefaultName(), worker.DefaultName(); len(m) != len(w) {
		t.Errorf("default names %q and %q differ in form", m, w)
	}
}
