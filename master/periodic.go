package master

import (
	"context"
	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"log/slog"
	"time"

	"github.com/fleet-go/fleet/internal/ratelog"
	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/store"
)

// The periodic service dispatches the ticks of the app's schedules, those
// of its configuration and those it registers in Go alike.
// Each round reads every schedule's cursor and the database clock in one
// statement, decides per schedule which ticks came due (periodic.Decide),
// and does each schedule's round in one transaction that moves the cursor
// from the value read (a compare-and-set) and inserts the ticks' jobs: of
// masters racing on a round one commits, the others find the cursor moved
// and write nothing; a master that dies mid-round leaves nothing behind.
// Rounds wake at the next tick due by the database clock (measured at the
// read, then counted on this process's monotonic clock), at most a tick
// apart.
const (
	// periodicTimeout bounds one round's statements.
	periodicTimeout = 10 * time.Second
	// periodicRetry is the wait after a round that created schedules'
	// rows, before reading their cursors.
	periodicRetry = 10 * time.Millisecond
)

// periodicSvc is the periodic service. It starts after duties and stops
// right after supervision, so a draining master keeps dispatching while
// its children finish. Without schedules it runs nothing.
type periodicSvc struct {
	st       *store.Store
	log      *slog.Logger
	logs     ratelog.Log
	scheds   []periodic.Schedule
	tick     time.Duration
	grace    time.Duration
	instance func() string    // recorded as the dispatcher of the ticks
	now      func() time.Time // the clock of the waits between rounds

	lc  svclife.Lifecycle
	sig struct {
		round svclife.Signal[time.Duration] // a round done, and the wait before the next
	}
}

func newPeriodicSvc(st *store.Store, set Settings, log *slog.Logger, instance func() string) *periodicSvc {
	return &periodicSvc{st: st, log: log, scheds: set.Periodic, tick: set.Tick, grace: set.PeriodicGrace, instance: instance, now: set.Now}
}

func (p *periodicSvc) Name() string { return "periodic" }

// Start runs rounds until Stop: the first at once, each next when the
// round before says.
func (p *periodicSvc) Start(ctx context.Context) error {
	sctx, end, err := p.lc.Begin(ctx, p.Name())
	if err != nil {
		return err
	}
	if len(p.scheds) == 0 {
		end()
		return nil
	}
	go func() {
		defer end()
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				wait := p.round(sctx)
				p.sig.round.Send(wait)
				t.Reset(wait)
			}
		}
	}()
	return nil
}

// Stop cancels the round in flight and waits.
func (p *periodicSvc) Stop() { p.lc.Halt() }

// round does one round of every schedule and returns how long to wait
// before the next.
func (p *periodicSvc) round(ctx context.Context) time.Duration {
	names := make([]string, len(p.scheds))
	for i, s := range p.scheds {
		names[i] = s.Name
	}
	rctx, cancel := context.WithTimeout(ctx, periodicTimeout)
	defer cancel()
	v, err := p.st.PeriodicRead(rctx, names)
	read := p.now()
	if err != nil {
		p.logs.Fail(p.log, "periodic", "read periodic schedules failed; retrying every tick", "err", err)
		return p.tick
	}
	p.logs.OK(p.log, "periodic", "reading periodic schedules works again")
	var missing []string
	var next time.Time
	for _, s := range p.scheds {
		st, ok := v.Find(s.Name)
		if !ok {
			missing = append(missing, s.Name)
			continue
		}
		plan := periodic.Decide(periodic.Round{Schedule: s, Cursor: st.Cursor, Now: v.Now, Grace: p.grace})
		if plan.Advance {
			p.dispatch(rctx, s, st.Cursor, plan)
		}
		if !plan.Next.IsZero() && (next.IsZero() || plan.Next.Before(next)) {
			next = plan.Next
		}
	}
	if len(missing) > 0 {
		n, err := p.st.PeriodicEnsure(rctx, missing)
		if err != nil {
			p.logs.Fail(p.log, "periodic-ensure", "create periodic schedules failed; retrying every tick", "schedules", missing, "err", err)
			return p.tick
		}
		p.logs.OK(p.log, "periodic-ensure", "creating periodic schedules works again")
		if n > 0 {
			p.log.Info("periodic schedules added: their first tick is the first after now", "schedules", missing)
		}
		return periodicRetry
	}
	if next.IsZero() {
		return p.tick
	}
	// By the database clock the next tick is next - v.Now after the read.
	return min(max(next.Sub(v.Now)-p.now().Sub(read), time.Millisecond), p.tick)
}

// dispatch does the round plan of schedule s, whose cursor was from.
func (p *periodicSvc) dispatch(ctx context.Context, s periodic.Schedule, from time.Time, plan periodic.Plan) {
	jobs := make([]store.JobInsertParams, 0, len(plan.Dispatch))
	for _, tick := range plan.Dispatch {
		payload, err := s.PayloadAt(tick)
		if err != nil { // checked at boot
			p.log.Error("periodic job not dispatched", "schedule", s.Name, "tick", tick, "err", err)
			return
		}
		o := s.JobOpts
		jobs = append(jobs, store.JobInsertParams{
			Queue: s.Queue, Name: s.Job, Payload: payload,
			MaxTries: o.MaxTries, BackoffSecs: o.BackoffSecs, Timeout: o.Timeout,
			Priority: o.Priority, Tags: o.Tags, Metadata: o.Metadata, LimitKey: o.LimitKey, Limit: o.Limit,
		})
	}
	res, err := p.st.PeriodicDispatch(ctx, store.PeriodicDispatchParams{
		Name: s.Name, From: from, To: plan.Cursor, Ticks: plan.Dispatch, Jobs: jobs, By: p.instance(),
	})
	key := "periodic:" + s.Name
	if err != nil {
		p.logs.Fail(p.log, key, "dispatch periodic jobs failed; retrying next round", "schedule", s.Name, "err", err)
		return
	}
	p.logs.OK(p.log, key, "dispatching periodic jobs works again")
	if !res.Won {
		return // another master did this round
	}
	if !plan.FirstMissed.IsZero() {
		p.log.Warn("periodic schedule missed ticks while no master ran", "schedule", s.Name,
			"first_missed", plan.FirstMissed, "last_missed", plan.LastMissed, "catch_up", s.CatchUp.String(),
			"dispatched", len(plan.Dispatch), "some_skipped", plan.Skipped)
	}
	for i, tick := range plan.Dispatch {
		p.log.Debug("periodic job dispatched", "schedule", s.Name, "tick", tick, "job", s.Job, "queue", s.Queue, "job_id", res.IDs[i])
	}
}
