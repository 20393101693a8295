package config

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Validate checks that values are in range: queue.driver is database or
// memory; log.level is debug, info, warn or error; log.format is text or
// json; queue.workers and queue.tries are at least 1; queue.backoff values
// are at least 0; queue.timeout_secs is at least 1;
// queue.timeout_grace_secs is at least 0; queue.poll_interval_ms is at
// least 10; queue.max_payload_bytes is at least 2; queue.default_queue and the names in queue.queues are not
// empty; the fleet section's cooldowns, shift and retentions are at least 1,
// queue.limits patterns are path.Match patterns with limits of at least 1;
// fleet.master_ttl_secs at least 1 with fleet.beat_interval_ms below half
// of it, fleet.on_stop leave or linger, fleet.name free of tabs, newlines
// and braces, and long-wait thresholds
// at least 0. The rules of supervisors belong to the package that resolves
// them.
//
// Each error names its key, e.g. "queue.workers: must be at least 1, got 0";
// all problems are reported, joined with errors.Join.
func (c *Config) Validate() error {
	if c == nil {
		return errors.New("config: nil Config")
	}
	_, secrets, _ := redact(c.Database.URL) // never echoed in a message
	q := c.Queue
	errs := []error{
		oneOf("queue.driver", q.Driver, secrets, "database", "memory"),
		notEmpty("queue.default_queue", q.DefaultQueue),
	}
	for i, name := range q.Queues {
		errs = append(errs, notEmpty(fmt.Sprintf("queue.queues[%d]", i), name))
	}
	errs = append(errs,
		atLeast("queue.workers", q.Workers, 1),
		atLeast("queue.tries", q.Tries, 1),
	)
	for i, secs := range q.Backoff {
		errs = append(errs, atLeast(fmt.Sprintf("queue.backoff[%d]", i), secs, 0))
	}
	errs = append(errs,
		atLeast("queue.timeout_secs", q.TimeoutSecs, 1),
		atLeast("queue.timeout_grace_secs", q.TimeoutGraceSecs, 0),
		atLeast("queue.poll_interval_ms", q.PollIntervalMs, 10),
		atLeast("queue.max_payload_bytes", q.MaxPayloadBytes, 2),
		oneOf("log.level", c.Log.Level, secrets, "debug", "info", "warn", "error"),
		oneOf("log.format", c.Log.Format, secrets, "text", "json"),
	)
	for _, p := range slices.Sorted(maps.Keys(q.Limits)) {
		errs = append(errs, limitPattern(fmt.Sprintf("queue.limits.%q", p), p, q.Limits[p]))
	}
	f := c.Fleet
	errs = append(errs,
		atLeast("fleet.balance_cooldown_secs", f.BalanceCooldownSecs, 1),
		atLeast("fleet.balance_max_shift", f.BalanceMaxShift, 1),
		atLeast("fleet.master_ttl_secs", f.MasterTTLSecs, 1),
		atLeast("fleet.beat_interval_ms", f.BeatIntervalMs, 10),
		oneOf("fleet.on_stop", f.OnStop, secrets, "leave", "linger"),
		atLeast("fleet.linger_secs", f.LingerSecs, 1),
		atLeast("fleet.start_timeout_secs", f.StartTimeoutSecs, 1),
		atLeast("fleet.long_wait_cooldown_minutes", f.LongWaitCooldownMinutes, 1),
		atLeast("fleet.trim.completed_hours", f.Trim.CompletedHours, 1),
		atLeast("fleet.trim.failed_days", f.Trim.FailedDays, 1),
		atLeast("fleet.trim.metrics_days", f.Trim.MetricsDays, 1),
	)
	if f.MasterTTLSecs >= 1 && f.BeatIntervalMs >= 10 && f.BeatIntervalMs*2 >= f.MasterTTLSecs*1000 {
		// One lost beat must never expire the row.
		errs = append(errs, invalid("fleet.beat_interval_ms",
			"must be below half of fleet.master_ttl_secs (%d ms ≥ %d s / 2)", f.BeatIntervalMs, f.MasterTTLSecs))
	}
	if strings.ContainsAny(f.Name, "\t\n\r{}") {
		errs = append(errs, invalid("fleet.name", "must hold no tab, newline or brace, got %q", f.Name))
	}
	for _, q := range slices.Sorted(maps.Keys(f.LongWait)) {
		errs = append(errs, atLeast("fleet.long_wait."+q, f.LongWait[q], 0))
	}
	return errors.Join(errs...)
}

// limitPattern checks one entry of queue.limits: a path.Match pattern of
// at most MaxLimitPatternBytes, valid UTF-8 without control characters,
// and a limit of at least 1.
func limitPattern(key, pattern string, n int) error {
	if _, err := path.Match(pattern, ""); err != nil || strings.TrimSpace(pattern) == "" {
		return invalid(key, "must be a job-name pattern such as \"exports.*\" (* any run of characters but /, ? one character, [a-z] a class), got %q", pattern)
	}
	if len(pattern) > MaxLimitPatternBytes {
		return invalid(key, "the pattern must be at most %d bytes, got %d", MaxLimitPatternBytes, len(pattern))
	}
	if !utf8.ValidString(pattern) || strings.IndexFunc(pattern, unicode.IsControl) >= 0 {
		return invalid(key, "the pattern must be valid UTF-8 without control characters")
	}
	return atLeast(key, n, 1)
}

// invalid returns the error for key.
func invalid(key, format string, args ...any) error {
	return &sourceError{where: key, msg: fmt.Sprintf(format, args...)}
}

// oneOf checks that got is one of allowed. The message quotes got, with
// secrets masked.
func oneOf(key, got string, secrets []string, allowed ...string) error {
	if slices.Contains(allowed, got) {
		return nil
	}
	return invalid(key, "must be %s, got %s", orList(allowed), quoteValue(got, secrets))
}

// orList writes "a", "a or b", "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// atLeast checks that got >= least.
func atLeast(key string, got, least int) error {
	if got >= least {
		return nil
	}
	return invalid(key, "must be at least %d, got %d", least, got)
}

// notEmpty checks that a name is not empty or blank.
func notEmpty(key, got string) error {
	if strings.TrimSpace(got) != "" {
		return nil
	}
	return invalid(key, "must not be empty")
}
