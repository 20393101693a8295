package queue

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleet-go/fleet/periodic"
)

// CatchUp says what becomes of the ticks of a periodic job that were
// missed because no master ran (see PeriodicOpts.CatchUp).
type CatchUp = periodic.CatchUp

// The catch-up modes, as [fleet.periodic.NAME]'s catch_up spells them
// none, last and all.
const (
	// CatchUpNone skips missed ticks (the default).
	CatchUpNone = periodic.CatchUpNone
	// CatchUpLast dispatches the latest missed tick, unless a tick on
	// time is dispatched in the same round.
	CatchUpLast = periodic.CatchUpLast
	// CatchUpAll dispatches the missed ticks, the latest CatchUpMax of
	// them.
	CatchUpAll = periodic.CatchUpAll
)

// MaxPeriodicNameBytes is the longest name of a periodic job, as for a
// [fleet.periodic.NAME] table.
const MaxPeriodicNameBytes = 200

// PeriodicOpts are how a periodic job ticks, beyond its cron expression;
// the zero value is UTC, no catch-up, no tick in the payload. They are
// [fleet.periodic.NAME]'s keys of the same names.
type PeriodicOpts struct {
	// Timezone is the IANA time zone the expression is read in, such as
	// "Europe/Paris"; "" is UTC. Local is refused: hosts in different
	// zones would tick at different instants.
	Timezone string
	// CatchUp says what becomes of the ticks missed while no master ran;
	// zero is CatchUpNone.
	CatchUp CatchUp
	// CatchUpMax caps the missed ticks CatchUpAll dispatches, 1 to
	// periodic.MaxCatchUpMax; 0 is periodic.DefaultCatchUpMax (10).
	CatchUpMax int
	// TickKey, when set, adds the tick's time (RFC 3339 in Timezone) to
	// the payload, which must then be a JSON object, under this key.
	TickKey string
}

// periodicJob is one Periodic registration, checked by PeriodicSchedules.
type periodicJob struct {
	name, cron string
	job        *JobSpec // the registry's own copy
	opts       []PeriodicOpts
}

// Periodic registers a periodic job: at each tick of cron, read in
// opts' time zone, the fleet's masters dispatch job, once per tick across
// the whole fleet, as they do the [fleet.periodic.NAME] tables of the
// configuration; name keys the schedule's state in the database and must
// not be one of those tables. cron is five fields (minute, hour, day of
// month, month, day of week) or a descriptor (@daily, @every 30s, ...),
// as the cron key of a table. Pass at most one PeriodicOpts.
//
// Each tick's job is job as it is now (the registry keeps a copy): its
// name, queue (the default queue when it names none) and payload, and its
// priority, tries, backoff, timeout, tags, metadata and limit. A job that
// is delayed, unique or a retry cannot be periodic, and dispatch
// middleware does not see these jobs: a master inserts them.
//
// Nothing is checked here, so that handlers may be registered in any
// order: PeriodicSchedules checks every registration, and `app fleet`
// refuses to start, naming the schedule, when one is wrong.
func (r *Registry) Periodic(name, cron string, job *JobSpec, opts ...PeriodicOpts) {
	if job != nil {
		job = job.clone()
		job.Payload, job.metadata = slices.Clone(job.Payload), slices.Clone(job.metadata)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.periodic = append(r.periodic, periodicJob{name: name, cron: cron, job: job, opts: slices.Clone(opts)})
}

// PeriodicSchedules returns the periodic jobs registered with Periodic as
// the masters run them, by name. d's Queue is the queue of a job that
// names none, and d's MaxPayloadBytes and Limits apply as at a Client's
// dispatch (the commands pass the configuration's queue section).
//
// It checks each registration as the configuration's tables are checked:
// the name, the cron expression (periodic.Parse), the time zone, the
// catch-up, a job with a handler in r, and the job as a dispatch would
// (ErrInvalidJob); and it refuses what a periodic job cannot carry. Every
// error names its schedule, as Periodic("NAME"); they are joined.
func (r *Registry) PeriodicSchedules(d Defaults) ([]periodic.Schedule, error) {
	r.mu.RLock()
	regs := slices.Clone(r.periodic)
	r.mu.RUnlock()
	d.Queue = cmp.Or(d.Queue, DefaultQueue)
	limits := nameLimits(d.Limits)
	count := map[string]int{}
	for _, p := range regs {
		count[p.name]++
	}
	var out []periodic.Schedule
	var errs []error
	for _, p := range regs {
		switch n := count[p.name]; {
		case n > 1:
			errs = append(errs, fmt.Errorf("Periodic(%q): registered %d times: a periodic job's name must be unique", p.name, n))
			count[p.name] = 0 // said once
			continue
		case n == 0:
			continue
		}
		s, err := r.periodicSchedule(p, &d, limits)
		if err != nil {
			errs = append(errs, fmt.Errorf("Periodic(%q): %w", p.name, err))
			continue
		}
		out = append(out, s)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b periodic.Schedule) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// periodicSchedule checks one registration and makes its schedule.
func (r *Registry) periodicSchedule(p periodicJob, d *Defaults, limits []nameLimit) (periodic.Schedule, error) {
	if err := checkName("the name", p.name, MaxPeriodicNameBytes); err != nil {
		return periodic.Schedule{}, err
	}
	if len(p.opts) > 1 {
		return periodic.Schedule{}, fmt.Errorf("takes at most one PeriodicOpts, got %d", len(p.opts))
	}
	var o PeriodicOpts
	if len(p.opts) == 1 {
		o = p.opts[0]
	}
	loc := time.UTC
	switch o.Timezone {
	case "":
	case "Local":
		return periodic.Schedule{}, errors.New("PeriodicOpts.Timezone must name a zone, not Local (an IANA name such as Europe/Paris, or UTC)")
	default:
		l, err := time.LoadLocation(o.Timezone)
		if err != nil {
			return periodic.Schedule{}, fmt.Errorf("PeriodicOpts.Timezone: unknown time zone %q (an IANA name such as Europe/Paris, or UTC)", o.Timezone)
		}
		loc = l
	}
	spec, err := periodic.Parse(p.cron, loc)
	if err != nil {
		return periodic.Schedule{}, fmt.Errorf("cron: %w", err)
	}
	mode := cmp.Or(o.CatchUp, CatchUpNone)
	if mode != CatchUpNone && mode != CatchUpLast && mode != CatchUpAll {
		return periodic.Schedule{}, fmt.Errorf("PeriodicOpts.CatchUp must be CatchUpNone, CatchUpLast or CatchUpAll, got %d", int(o.CatchUp))
	}
	maxMissed := cmp.Or(o.CatchUpMax, periodic.DefaultCatchUpMax)
	if maxMissed < 1 || maxMissed > periodic.MaxCatchUpMax {
		return periodic.Schedule{}, fmt.Errorf("PeriodicOpts.CatchUpMax must be 1 to %d, got %d", periodic.MaxCatchUpMax, o.CatchUpMax)
	}
	if p.job == nil {
		return periodic.Schedule{}, errors.New("needs a job (NewJob or NewTypedJob)")
	}
	j := p.job
	jp, err := jobParams(d, limits, j)
	if err != nil {
		return periodic.Schedule{}, err
	}
	if _, ok := r.Lookup(j.Name); !ok {
		return periodic.Schedule{}, fmt.Errorf("no handler is registered for job %q (registered: %s)", j.Name, strings.Join(r.Names(), ", "))
	}
	switch {
	case j.delay != 0:
		return periodic.Schedule{}, fmt.Errorf("job %q has a Delay, which a periodic job cannot have: write the delay into the cron expression", j.Name)
	case j.unique != nil:
		return periodic.Schedule{}, fmt.Errorf("job %q is Unique, which a periodic job cannot be: each tick is dispatched once already", j.Name)
	case j.retryOf != 0:
		return periodic.Schedule{}, fmt.Errorf("job %q is a RetryOf a failed job, which a periodic job cannot be", j.Name)
	}
	s := periodic.Schedule{
		Name: p.name, Source: periodic.SourceCode, Spec: spec,
		Job: jp.Name, Queue: jp.Queue, Payload: jp.Payload, TickKey: o.TickKey,
		CatchUp: mode, CatchUpMax: maxMissed,
		JobOpts: periodic.JobOpts{
			Priority: jp.Priority, MaxTries: jp.MaxTries, BackoffSecs: jp.BackoffSecs, Timeout: jp.Timeout,
			Tags: jp.Tags, Metadata: jp.Metadata, LimitKey: jp.LimitKey, Limit: jp.Limit,
		},
	}
	if o.TickKey != "" {
		if _, err := s.PayloadAt(time.Unix(0, 0)); err != nil {
			return periodic.Schedule{}, fmt.Errorf("PeriodicOpts.TickKey needs a payload that is a JSON object, got %s", shortJSON(s.Payload))
		}
	}
	return s, nil
}

// shortJSON is b for an error message, cut after 60 bytes.
func shortJSON(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "..."
	}
	return string(b)
}
