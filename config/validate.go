package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fleet-go/fleet/internal/names"
)

// Validate checks that values are in range: database.pooler is none,
// session or transaction; queue.driver is database or memory;
// database.max_conns is 0 or at least 2; database.reserve_connections, when
// set, is at least 0; fleet.max_connections is at least
// 0; log.level is debug, info, warn or error; log.format is text or
// json; queue.workers and queue.tries are at least 1; queue.backoff values
// are at least 0; queue.timeout_secs is at least 1;
// queue.timeout_grace_secs is at least 0; queue.poll_interval_ms is at
// least 10; queue.prefetch_hold_ms at least 1; queue.max_payload_bytes is at least 2;
// queue.payload_budget_bytes at least 0; queue.default_queue and the names in queue.queues are
// queue names (see queue.CheckQueue: not empty, no comma or control
// character, at most 200 bytes); the fleet section's cooldowns, shift and retentions are at least 1,
// queue.limits patterns are path.Match patterns with limits of at least 1;
// fleet.master_ttl_secs at least 1 with fleet.beat_interval_ms below half
// of it, fleet.on_stop leave or linger, fleet.timescale auto or off, fleet.name free of tabs, newlines
// and braces, long-wait thresholds at least 0, fleet.path a URL path such
// as /_fleet (see checkDashboardPath), and for each
// fleet.periodic.NAME: cron and job set, catch_up none, last or all,
// catch_up_max 1 to 1000, timezone an IANA zone (not Local), payload JSON
// within queue.max_payload_bytes, an object when tick_key is set. The
// rules of supervisors belong to the package that resolves them, and so do
// a schedule's cron expression and job handler.
//
// Each error names its key, e.g. "queue.workers: must be at least 1, got 0";
// all problems are reported, joined with errors.Join.
func (c *Config) Validate() error {
	if c == nil {
		return errors.New("config: nil Config")
	}
	secrets := c.secrets() // never echoed in a message
	q := c.Queue
	errs := []error{
		oneOf("database.pooler", c.Database.Pooler, secrets, PoolerNone, PoolerSession, PoolerTransaction),
		oneOf("queue.driver", q.Driver, secrets, "database", "memory"),
		poolSize("database.max_conns", c.Database.MaxConns),
		optionalAtLeast("database.reserve_connections", c.Database.ReserveConnections, 0),
		names.CheckQueue("queue.default_queue:", q.DefaultQueue),
	}
	for i, name := range q.Queues {
		errs = append(errs, names.CheckQueue(fmt.Sprintf("queue.queues[%d]:", i), name))
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
		atLeast("queue.prefetch_hold_ms", q.PrefetchHoldMs, 1),
		atLeast("queue.max_payload_bytes", q.MaxPayloadBytes, 2),
		atLeast("queue.payload_budget_bytes", q.PayloadBudgetBytes, 0),
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
		atLeast("fleet.max_connections", f.MaxConnections, 0),
		atLeast("fleet.long_wait_cooldown_minutes", f.LongWaitCooldownMinutes, 1),
		atLeast("fleet.held_warn_secs", f.HeldWarnSecs, 1),
		atLeast("fleet.trim.completed_hours", f.Trim.CompletedHours, 1),
		atLeast("fleet.trim.failed_days", f.Trim.FailedDays, 1),
		atLeast("fleet.trim.metrics_days", f.Trim.MetricsDays, 1),
		oneOf("fleet.timescale", f.Timescale, secrets, TimescaleAuto, TimescaleOff),
	)
	if f.MasterTTLSecs >= 1 && f.BeatIntervalMs >= 10 && f.BeatIntervalMs*2 >= f.MasterTTLSecs*1000 {
		// One lost beat must never expire the row.
		errs = append(errs, invalid("fleet.beat_interval_ms",
			"must be below half of fleet.master_ttl_secs (%d ms ≥ %d s / 2)", f.BeatIntervalMs, f.MasterTTLSecs))
	}
	if len(f.Name) > MaxMasterNameBytes {
		errs = append(errs, invalid("fleet.name", "must be at most %d bytes, got %d bytes (%q)", MaxMasterNameBytes, len(f.Name), f.Name))
	} else if strings.ContainsAny(f.Name, "\t\n\r{}") {
		errs = append(errs, invalid("fleet.name", "must hold no tab, newline or brace, got %q", f.Name))
	}
	if err := checkDashboardPath(f.Path); err != nil {
		errs = append(errs, err)
	}
	for _, q := range slices.Sorted(maps.Keys(f.LongWait)) {
		errs = append(errs, atLeast("fleet.long_wait."+q, f.LongWait[q], 0))
	}
	for _, name := range slices.Sorted(maps.Keys(f.Periodic)) {
		errs = append(errs, validatePeriodic(name, f.Periodic[name], q.MaxPayloadBytes, secrets)...)
	}
	return errors.Join(errs...)
}

// secrets returns the passwords of database.url and database.direct_url,
// as written and decoded, to be masked wherever a value is echoed.
func (c *Config) secrets() []string {
	_, out, _ := redact(c.Database.URL)
	_, direct, _ := redact(c.Database.DirectURL)
	return append(out, direct...)
}

// PeriodicKey names the key of schedule name as errors name it:
// fleet.periodic.NAME.KEY, NAME quoted when it is not a bare key.
func PeriodicKey(name, key string) string {
	if key == "" {
		return formatKey([]string{"fleet", "periodic", name})
	}
	return formatKey([]string{"fleet", "periodic", name, key})
}

// Bounds of fleet.periodic.NAME.catch_up_max.
const (
	PeriodicCatchUpMaxDefault = 10
	PeriodicCatchUpMaxLimit   = 1000
)

// validatePeriodic checks what of one [fleet.periodic.NAME] needs nothing
// but the standard library: the name, the required keys, catch_up and its
// cap, the time zone, and the payload. The cron expression and the job's
// handler are checked where the schedules are built (the fleet master's
// boot), which has the parser and the app's registry.
func validatePeriodic(name string, p PeriodicConfig, maxPayload int, secrets []string) []error {
	key := func(k string) string { return PeriodicKey(name, k) }
	var errs []error
	if strings.TrimSpace(name) == "" || len(name) > 200 || strings.ContainsFunc(name, unicode.IsControl) {
		errs = append(errs, invalid(key(""), "a schedule's name must be 1 to 200 bytes with no control character"))
	}
	errs = append(errs, notEmpty(key("cron"), p.Cron), notEmpty(key("job"), p.Job))
	if p.CatchUp != "" {
		errs = append(errs, oneOf(key("catch_up"), p.CatchUp, secrets, "none", "last", "all"))
	}
	if p.CatchUpMax != nil {
		if n := *p.CatchUpMax; n < 1 || n > PeriodicCatchUpMaxLimit {
			errs = append(errs, invalid(key("catch_up_max"), "must be 1 to %d, got %d", PeriodicCatchUpMaxLimit, n))
		}
	}
	switch tz := p.Timezone; tz {
	case "":
	case "Local":
		// Hosts in different zones would tick at different instants.
		errs = append(errs, invalid(key("timezone"), "must name a zone, not Local (an IANA name such as Europe/Berlin, or UTC)"))
	default:
		if _, err := time.LoadLocation(tz); err != nil {
			errs = append(errs, invalid(key("timezone"), "unknown time zone %s (an IANA name such as Europe/Berlin, or UTC)", quoteValue(tz, secrets)))
		}
	}
	if p.Payload != "" {
		switch {
		case !json.Valid([]byte(p.Payload)):
			errs = append(errs, invalid(key("payload"), "must be JSON, as a string (payload = '{\"report\": \"daily\"}')"))
		case maxPayload > 0 && len(p.Payload) > maxPayload:
			errs = append(errs, invalid(key("payload"), "is %d bytes, more than queue.max_payload_bytes (%d)", len(p.Payload), maxPayload))
		}
	}
	if p.TickKey != "" && p.Payload != "" && json.Valid([]byte(p.Payload)) {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(p.Payload), &obj); err != nil || obj == nil {
			errs = append(errs, invalid(key("tick_key"), "needs a payload that is a JSON object"))
		}
	}
	return errs
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
	return &sourceError{where: key, msg: fmt.Sprintf(format, shortValues(args)...)}
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

// optionalAtLeast is atLeast for a key that may be unset (nil).
func optionalAtLeast(key string, got *int, least int) error {
	if got == nil {
		return nil
	}
	return atLeast(key, *got, least)
}

// poolSize: 0 (the default) or at least 2.
func poolSize(key string, got int) error {
	if got == 0 || got >= 2 {
		return nil
	}
	return invalid(key, "must be 0 (the default sizes) or at least 2, got %d", got)
}

// notEmpty checks that a name is not empty or blank.
func notEmpty(key, got string) error {
	if strings.TrimSpace(got) != "" {
		return nil
	}
	return invalid(key, "must not be empty")
}

// checkDashboardPath checks fleet.path: "/" then segments of letters,
// digits, '.', '_', '~' and '-' joined by single slashes, no trailing
// slash, no "." or ".." segment, and none of the master's own endpoints
// (/metrics, /healthz, /readyz).
func checkDashboardPath(p string) error {
	const key = "fleet.path"
	rest, ok := strings.CutPrefix(p, "/")
	if !ok || rest == "" || strings.HasSuffix(rest, "/") {
		return invalid(key, "must be a URL path such as /_fleet (a leading slash, no trailing one), got %q", p)
	}
	for seg := range strings.SplitSeq(rest, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return invalid(key, "must not hold an empty, . or .. segment, got %q", p)
		}
		for _, c := range seg {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("._~-", c)) {
				return invalid(key, "may hold only letters, digits, . _ ~ - and slashes, got %q", p)
			}
		}
	}
	for _, taken := range []string{"/metrics", "/healthz", "/readyz"} {
		if p == taken || strings.HasPrefix(p, taken+"/") {
			return invalid(key, "must not be %s, which the master serves itself, got %q", taken, p)
		}
	}
	return nil
}
