package fleet

import (
	"context"
	"slices"
	"time"

	"github.com/fleet-go/fleet/periodic"
)

// PeriodicView is the state of the periodic schedules at one instant of
// the database clock.
type PeriodicView struct {
	At        time.Time          `json:"at"`
	Schedules []PeriodicSchedule `json:"schedules"`
}

// PeriodicSchedule is one schedule: as declared (when it is) and as the
// database knows it. Times are in the schedule's time zone.
type PeriodicSchedule struct {
	Name string `json:"name"`
	// Configured is false for a schedule the database knows that the
	// schedules given do not declare (removed, or another app's); only its
	// state is known.
	Configured bool `json:"configured"`
	// Source is where the schedule is declared: "config" for a
	// [fleet.periodic.NAME] table, "code" for one the app registers in Go
	// (queue.Registry's Periodic); "" when it is not configured.
	Source     string `json:"source,omitempty"`
	Cron       string `json:"cron,omitempty"`
	Timezone   string `json:"timezone,omitempty"`
	Job        string `json:"job,omitempty"`
	Queue      string `json:"queue,omitempty"`
	CatchUp    string `json:"catch_up,omitempty"`
	CatchUpMax int    `json:"catch_up_max,omitempty"`
	// NextTick is the first tick after now (nil: none within five years,
	// or not configured).
	NextTick *time.Time `json:"next_tick"`
	// DueSince is the oldest tick that came due and no master has decided
	// yet (nil when none): no master is dispatching the schedule.
	DueSince *time.Time `json:"due_since"`
	// Cursor is the instant up to which every tick is decided; nil before
	// a master first saw the schedule.
	Cursor *time.Time `json:"cursor"`
	// LastTick and LastJobID are the latest tick dispatched and its job.
	LastTick         *time.Time `json:"last_tick"`
	LastJobID        *int64     `json:"last_job_id"`
	LastDispatchedAt *time.Time `json:"last_dispatched_at"`
	// Recent are the latest ticks dispatched, newest first, as far as
	// they are kept (as long as completed history).
	Recent []PeriodicTick `json:"recent_ticks"`
}

// PeriodicTick is one dispatched tick and the job it made.
type PeriodicTick struct {
	Tick         time.Time `json:"tick"`
	JobID        int64     `json:"job_id"`
	DispatchedAt time.Time `json:"dispatched_at"`
	// DispatchedBy is the instance id of the master that dispatched it.
	DispatchedBy string `json:"dispatched_by"`
}

// PeriodicSchedules returns the app's schedules, Options.Periodic.
func (s *Service) PeriodicSchedules() []periodic.Schedule { return slices.Clone(s.periodic) }

// Periodic returns the schedules given (as declared, in their order),
// then those the database knows beyond them, each with its next tick by
// the database clock, its last tick and job, and up to recent of its
// latest ticks (0: none).
func (s *Service) Periodic(ctx context.Context, schedules []periodic.Schedule, recent int) (PeriodicView, error) {
	v, err := s.st.PeriodicList(ctx)
	if err != nil {
		return PeriodicView{}, err
	}
	out := PeriodicView{At: v.Now}
	var locs []*time.Location // of each of out.Schedules
	seen := map[string]bool{}
	for _, sc := range schedules {
		seen[sc.Name] = true
		loc := sc.Spec.Location()
		p := PeriodicSchedule{
			Name: sc.Name, Configured: true, Source: string(sc.Source), Cron: sc.Spec.Expr(), Timezone: loc.String(), Job: sc.Job, Queue: sc.Queue,
			CatchUp: sc.CatchUp.String(),
		}
		if sc.CatchUp == periodic.CatchUpAll {
			p.CatchUpMax = sc.CatchUpMax
		}
		if next := sc.Spec.Next(v.Now); !next.IsZero() {
			p.NextTick = &next
		}
		if st, ok := v.Find(sc.Name); ok {
			fillState(&p, st.Cursor, st.LastTick, st.LastJobID, st.LastDispatchedAt, loc)
			if due := sc.Spec.Next(st.Cursor); !due.IsZero() && !due.After(v.Now) {
				p.DueSince = &due
			}
		}
		out.Schedules = append(out.Schedules, p)
		locs = append(locs, loc)
	}
	for _, st := range v.States {
		if seen[st.Name] {
			continue
		}
		p := PeriodicSchedule{Name: st.Name}
		fillState(&p, st.Cursor, st.LastTick, st.LastJobID, st.LastDispatchedAt, time.UTC)
		out.Schedules = append(out.Schedules, p)
		locs = append(locs, time.UTC)
	}
	if recent > 0 {
		for i := range out.Schedules {
			p := &out.Schedules[i]
			ticks, err := s.st.PeriodicTicks(ctx, p.Name, recent)
			if err != nil {
				return PeriodicView{}, err
			}
			loc := locs[i]
			p.Recent = make([]PeriodicTick, len(ticks))
			for j, t := range ticks {
				p.Recent[j] = PeriodicTick{Tick: t.Tick.In(loc), JobID: t.JobID, DispatchedAt: t.DispatchedAt.In(loc), DispatchedBy: t.DispatchedBy}
			}
		}
	}
	return out, nil
}

func fillState(p *PeriodicSchedule, cursor time.Time, last *time.Time, job *int64, at *time.Time, loc *time.Location) {
	c := cursor.In(loc)
	p.Cursor = &c
	if last != nil {
		l := last.In(loc)
		p.LastTick = &l
	}
	if at != nil {
		a := at.In(loc)
		p.LastDispatchedAt = &a
	}
	p.LastJobID = job
}
