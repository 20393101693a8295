package master

import (
	"context"
	"time"

	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/store"
)

// The periodic service dispatches the ticks of the configured schedules.
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

// periodicRound does one round of every schedule and returns how long to
// wait before the next.
func (m *Master) periodicRound(ctx context.Context) time.Duration {
	scheds := m.set.Periodic
	names := make([]string, len(scheds))
	for i, s := range scheds {
		names[i] = s.Name
	}
	rctx, cancel := context.WithTimeout(ctx, periodicTimeout)
	defer cancel()
	v, err := m.st.PeriodicRead(rctx, names)
	read := time.Now()
	if err != nil {
		m.logs.Fail(m.log, "periodic", "read periodic schedules failed; retrying every tick", "err", err)
		return m.set.Tick
	}
	m.logs.OK(m.log, "periodic", "reading periodic schedules works again")
	var missing []string
	var next time.Time
	for _, s := range scheds {
		st, ok := v.Find(s.Name)
		if !ok {
			missing = append(missing, s.Name)
			continue
		}
		plan := periodic.Decide(periodic.Round{Schedule: s, Cursor: st.Cursor, Now: v.Now, Grace: m.set.PeriodicGrace})
		if plan.Advance {
			m.dispatchTicks(rctx, s, st.Cursor, plan)
		}
		if !plan.Next.IsZero() && (next.IsZero() || plan.Next.Before(next)) {
			next = plan.Next
		}
	}
	if len(missing) > 0 {
		n, err := m.st.PeriodicEnsure(rctx, missing)
		if err != nil {
			m.logs.Fail(m.log, "periodic-ensure", "create periodic schedules failed; retrying every tick", "schedules", missing, "err", err)
			return m.set.Tick
		}
		m.logs.OK(m.log, "periodic-ensure", "creating periodic schedules works again")
		if n > 0 {
			m.log.Info("periodic schedules added: their first tick is the first after now", "schedules", missing)
		}
		return periodicRetry
	}
	if next.IsZero() {
		return m.set.Tick
	}
	// By the database clock the next tick is next - v.Now after the read.
	return min(max(next.Sub(v.Now)-time.Since(read), time.Millisecond), m.set.Tick)
}

// dispatchTicks does the round plan of schedule s, whose cursor was from.
func (m *Master) dispatchTicks(ctx context.Context, s periodic.Schedule, from time.Time, plan periodic.Plan) {
	jobs := make([]store.JobInsertParams, 0, len(plan.Dispatch))
	for _, tick := range plan.Dispatch {
		payload, err := s.PayloadAt(tick)
		if err != nil { // checked at boot
			m.log.Error("periodic job not dispatched", "schedule", s.Name, "tick", tick, "err", err)
			return
		}
		jobs = append(jobs, store.JobInsertParams{Queue: s.Queue, Name: s.Job, Payload: payload})
	}
	res, err := m.st.PeriodicDispatch(ctx, store.PeriodicDispatchParams{
		Name: s.Name, From: from, To: plan.Cursor, Ticks: plan.Dispatch, Jobs: jobs, By: m.Instance(),
	})
	key := "periodic:" + s.Name
	if err != nil {
		m.logs.Fail(m.log, key, "dispatch periodic jobs failed; retrying next round", "schedule", s.Name, "err", err)
		return
	}
	m.logs.OK(m.log, key, "dispatching periodic jobs works again")
	if !res.Won {
		return // another master did this round
	}
	if !plan.FirstMissed.IsZero() {
		m.log.Warn("periodic schedule missed ticks while no master ran", "schedule", s.Name,
			"first_missed", plan.FirstMissed, "last_missed", plan.LastMissed, "catch_up", s.CatchUp.String(),
			"dispatched", len(plan.Dispatch), "some_skipped", plan.Skipped)
	}
	for i, tick := range plan.Dispatch {
		m.log.Debug("periodic job dispatched", "schedule", s.Name, "tick", tick, "job", s.Job, "queue", s.Queue, "job_id", res.IDs[i])
	}
}

// startTimedLoop runs run until stopped, waiting what each run returns
// before the next.
func startTimedLoop(run func(context.Context) time.Duration) *loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loop{quit: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(l.done)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-l.quit:
				return
			case <-t.C:
				t.Reset(run(ctx))
			}
		}
	}()
	return l
}
