// Package periodic is the pure part of fleet's periodic jobs: a schedule's
// cron expression, in its time zone, turned into the ticks it makes, and
// the decision of which ticks a master dispatches in one round, given the
// schedule's cursor (every tick up to it has been decided) and the
// database's clock. It reads no clock and runs no statement; the master
// does both (package master), and the store makes each decision happen
// once across the fleet.
//
// Expressions are parsed by github.com/robfig/cron/v3 (five fields:
// minute, hour, day of month, month, day of week; and the descriptors
// @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly and
// @every DURATION). Only its parser and its Schedule.Next are used; its
// scheduler is not: ticks are driven by the master's loop on the
// database's clock.
package periodic

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	// The IANA time zone database, for hosts that have none (a container
	// built from scratch): a schedule's time zone must load everywhere.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// CatchUp says what a master does with the ticks of a schedule that were
// missed: those no master dispatched within the grace (fleet.master_ttl_secs)
// after their time, because no master ran.
type CatchUp int

const (
	// CatchUpNone skips missed ticks.
	CatchUpNone CatchUp = iota + 1
	// CatchUpLast dispatches the latest missed tick, unless a tick that is
	// on time is dispatched in the same round.
	CatchUpLast
	// CatchUpAll dispatches every missed tick, up to the schedule's
	// CatchUpMax latest ones; older ones are skipped.
	CatchUpAll
)

// String is the configuration's spelling: none, last or all.
func (c CatchUp) String() string {
	switch c {
	case CatchUpNone:
		return "none"
	case CatchUpLast:
		return "last"
	case CatchUpAll:
		return "all"
	}
	return fmt.Sprintf("CatchUp(%d)", int(c))
}

// MarshalText writes the configuration's spelling.
func (c CatchUp) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// ParseCatchUp reads none, last or all.
func ParseCatchUp(s string) (CatchUp, error) {
	switch s {
	case "none":
		return CatchUpNone, nil
	case "last":
		return CatchUpLast, nil
	case "all":
		return CatchUpAll, nil
	}
	return 0, fmt.Errorf("catch-up must be none, last or all, got %q", s)
}

// Bounds of a schedule's catch_up_max.
const (
	// DefaultCatchUpMax is how many missed ticks catch_up = "all"
	// dispatches at most when catch_up_max is not set.
	DefaultCatchUpMax = 10
	// MaxCatchUpMax is the largest catch_up_max allowed: the missed ticks
	// of one round are dispatched in one transaction.
	MaxCatchUpMax = 1000
)

// Spec is a parsed cron expression in a time zone: the ticks it makes.
type Spec struct {
	expr  string
	loc   *time.Location
	every time.Duration // @every: ticks at whole multiples since the Unix epoch
	sched cron.Schedule
}

// Parse parses expr, read in loc (UTC when nil): five fields or a
// descriptor. An expression that names its own time zone (TZ=... or
// CRON_TZ=...) is refused: the time zone is loc, one source only. @every
// takes a whole number of seconds, at least one; its ticks are whole
// multiples of the duration since 1970-01-01 UTC, the same on every master
// whatever it started at and whatever the time zone (so @every 1h ticks on
// the hour, @every 15m at :00, :15, :30 and :45). An expression that never
// ticks (30 February) is refused.
func Parse(expr string, loc *time.Location) (Spec, error) {
	if loc == nil {
		loc = time.UTC
	}
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return Spec{}, errors.New("empty expression")
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return Spec{}, fmt.Errorf("%q names a time zone in the expression: set the timezone key instead", expr)
	}
	s := Spec{expr: expr, loc: loc}
	if rest, ok := strings.CutPrefix(expr, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return Spec{}, fmt.Errorf("%q: %w", expr, err)
		}
		if d < time.Second || d%time.Second != 0 {
			return Spec{}, fmt.Errorf("%q: @every takes a whole number of seconds, at least 1s", expr)
		}
		s.every = d
		return s, nil
	}
	p := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	sched, err := p.Parse(expr)
	if err != nil {
		return Spec{}, fmt.Errorf("%q: %w", expr, err)
	}
	s.sched = sched
	// Any fixed instant will do to check that it ever ticks: the parser
	// looks five years ahead, so a leap day is found.
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Spec{}, fmt.Errorf("%q never ticks", expr)
	}
	return s, nil
}

// MustParse is Parse for expressions known to be good; it panics on an
// error.
func MustParse(expr string, loc *time.Location) Spec {
	s, err := Parse(expr, loc)
	if err != nil {
		panic(err)
	}
	return s
}

// Expr is the expression as written (trimmed).
func (s Spec) Expr() string { return s.expr }

// Location is the time zone the expression is read in.
func (s Spec) Location() *time.Location { return s.loc }

// String is the expression and its time zone.
func (s Spec) String() string { return s.expr + " (" + s.loc.String() + ")" }

// Next returns the first tick strictly after t, in the schedule's time
// zone, or the zero time when there is none within five years. Across a
// daylight-saving change it follows the cron library: a wall-clock time
// that does not exist that day (02:30 when clocks jump from 02:00 to 03:00)
// does not tick that day, and one that happens twice (02:30 when clocks go
// back from 03:00 to 02:00) ticks at both; schedules that name no hour in
// the changing hour (03:00, @daily, hourly ones) tick once as usual.
func (s Spec) Next(t time.Time) time.Time {
	if s.every > 0 {
		d := s.every.Nanoseconds()
		u := t.UnixNano()
		n := u / d * d
		if n > u { // negative u rounds towards zero
			n -= d
		}
		return time.Unix(0, n+d).In(s.loc)
	}
	if s.sched == nil {
		return time.Time{}
	}
	return s.sched.Next(t.In(s.loc))
}

// Source says where a schedule is declared.
type Source string

const (
	// SourceConfig is a [fleet.periodic.NAME] table of the configuration.
	SourceConfig Source = "config"
	// SourceCode is a schedule the app registers in Go (queue.Registry's
	// Periodic).
	SourceCode Source = "code"
)

// Schedule is one periodic schedule, a [fleet.periodic.NAME] table or one
// registered in Go: what is dispatched at each tick.
type Schedule struct {
	// Name is the schedule's name (the NAME of its table); it keys the
	// schedule's state in the database.
	Name string
	// Source is where the schedule is declared.
	Source Source
	Spec   Spec
	// Job and Queue are the job's name and queue.
	Job   string
	Queue string
	// Payload is the job's JSON payload.
	Payload json.RawMessage
	// JobOpts are the options of each tick's job beyond its name, queue
	// and payload; zero fields set nothing.
	JobOpts JobOpts
	// TickKey, when set, adds the tick's time (RFC 3339 in the schedule's
	// time zone) to the payload, an object, under this key.
	TickKey string
	// CatchUp and CatchUpMax say what becomes of missed ticks.
	CatchUp    CatchUp
	CatchUpMax int
}

// JobOpts are the options a schedule gives the job of each tick, as a
// dispatch stores them. A zero field sets nothing: the worker that runs the
// job applies its defaults.
type JobOpts struct {
	// Priority orders the job among the ready jobs of its queue (lower
	// first); 0 is the default.
	Priority int
	// MaxTries is the most attempts the job gets.
	MaxTries int
	// BackoffSecs is the delay in seconds before each retry; nil: the
	// worker's default.
	BackoffSecs []int
	// Timeout is how long one attempt may run.
	Timeout time.Duration
	// Tags are the job's labels.
	Tags []string
	// Metadata is the job's metadata, a JSON object.
	Metadata json.RawMessage
	// LimitKey and Limit put the job under a concurrency limit; "": none.
	LimitKey string
	Limit    int
}

// PayloadAt returns the payload of the job of tick: Payload, with the tick
// under TickKey when set.
func (s Schedule) PayloadAt(tick time.Time) ([]byte, error) {
	if s.TickKey == "" {
		if len(s.Payload) == 0 {
			return []byte(`{}`), nil
		}
		return s.Payload, nil
	}
	obj := map[string]json.RawMessage{}
	if len(s.Payload) > 0 {
		if err := json.Unmarshal(s.Payload, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("schedule %s: tick_key needs a payload that is a JSON object", s.Name)
		}
	}
	at, err := json.Marshal(tick.In(s.Spec.Location()).Format(time.RFC3339))
	if err != nil {
		return nil, fmt.Errorf("schedule %s: encode the tick: %w", s.Name, err)
	}
	obj[s.TickKey] = at
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: encode the payload: %w", s.Name, err)
	}
	return b, nil
}
