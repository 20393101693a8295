// Package master is the fleet master: it runs no jobs itself. It resolves
// supervisors into process groups, starts workers through a Spawner, balances
// them across queues, recycles and restarts them, applies pause and
// terminate requests stored in PostgreSQL, keeps its membership row beating,
// and releases the jobs of workers and masters that died.
//
// A master is an ordered list of services (Master.services), each its own
// type and file, with its own state, goroutine, and a time limit on every
// statement derived from its own context, and the same lifecycle: Start,
// and a Stop that cancels its work, statements in flight included, and
// waits for it (safe before Start and twice). The services talk through
// mailboxes (mailbox.go) whose sends never block, and share no state. Run
// starts them in this order, and stops them in the reverse:
//
//  1. membership (membership.go, over package membership): the beat. It
//     starts first, because the first beat is the boot check and gives the
//     instance its row before any worker can claim under it, and stops
//     last, because a peer releases the jobs of a master whose row
//     expired: the row keeps beating, as draining, until the last child
//     has exited and its jobs are released.
//  2. housekeeping (housekeeping.go): the release of what exited workers
//     held and of the jobs of expired members, the check for workers
//     overdue on a job, and the sweep of the concurrency limits. It stops
//     after supervision, so that the jobs of the last exiting children are
//     released before the row goes.
//  3. shared state (sharedstate.go): pause flags and terminate requests,
//     read every tick; the first read is done by its Start, before any
//     child starts.
//  4. workload (workload.go): queue counts and recent runtimes for the
//     balancer, read every balance cooldown; the first by its Start.
//  5. alerts (alerts.go): hands long-wait alerts to the app's listener,
//     from its own goroutine; it outlives duties, which raise them.
//  6. duties (duties.go): metrics snapshots, partition upkeep, trimming and
//     long-wait checks, claimed per period across the fleet.
//  7. periodic (periodic.go): the ticks of the periodic schedules, each
//     dispatched once across the fleet. It stops right after supervision,
//     so a draining master keeps dispatching while its children finish.
//  8. held transactions (held.go): names, in a warning at most once a
//     minute, a session that has held back the cleanup of dead rows for
//     longer than Settings.HeldWarn. It needs no other service, and none
//     needs it.
//  9. supervision (supervision.go): children, balancing, recycling and
//     crash backoff. It runs no statement itself, so a slow query delays
//     neither a beat nor a child's event; it reads what the other services
//     last published, and its stop is the drain of the children.
//
// Run returns once supervision has ended (its context ended, or a
// terminate request arrived) and every service has stopped. What the
// services do after the children are gone (their last rounds, the release
// of what the children held, leaving the fleet) shares StopBudget.
//
// Jobs never wait on any of them: children claim and finish on their own
// connections.
package master

import (
	"context"
	"errors"
	"fmt"
	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/membership"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// Summary is what a master did, returned by Run.
type Summary struct {
	// Started counts processes started.
	Started int
	// Recycled counts processes that exited at a recycling limit.
	Recycled int
	// Crashed counts processes that died without saying why, and spawns
	// that failed.
	Crashed int
	// Jobs counts the attempts its processes finished.
	Jobs int64
	// Unsaved counts finished attempts whose outcome its processes could
	// not write before exiting (the database was away): their jobs are
	// released later and run again.
	Unsaved int
}

// Option configures a Master.
type Option func(*Master)

// WithSpawner sets how workers are started (default: none; New fails
// without one).
func WithSpawner(s spawner.Spawner) Option { return func(m *Master) { m.spawner = s } }

// WithSettings sets the master's settings.
func WithSettings(s Settings) Option { return func(m *Master) { m.set = s } }

// Master supervises workers. Build it with New; call Run once.
type Master struct {
	spawner spawner.Spawner
	set     Settings
	log     *slog.Logger
	member  *membership.Service

	// services is the master, in start order; Run stops them in reverse.
	services []service
	// supervision is the last of them, whose end ends Run.
	supervision *supervision
	// budget is shared by the services' stops once supervision has ended.
	budget *stopBudget

	// The mailboxes between the services.
	status   *status                                    // supervision -> membership's beat, Readiness
	state    *latest[stateSnap]                         // shared state -> supervision
	workload *latest[map[string]balancer.QueueWorkload] // workload -> supervision
	kills    *latest[[]string]                          // housekeeping -> supervision
	suspects *latest[suspectSnap]                       // housekeeping -> supervision
	releases *fifo[*releaseReq]                         // supervision -> housekeeping
	// duties -> alerts is the alerts service's own queue (alerts.offer).

	ran atomic.Bool
	sig struct {
		lifecycle svclife.Signal[string] // "start NAME", "stop NAME", in Run's order
	}
}

// New returns a master for supervisors.
func New(st *store.Store, supervisors []supervisor.Supervisor, opts ...Option) (*Master, error) {
	m := &Master{}
	for _, o := range opts {
		o(m)
	}
	if m.spawner == nil {
		return nil, errors.New("master needs a spawner")
	}
	if len(supervisors) == 0 {
		return nil, errors.New("master needs at least one supervisor")
	}
	m.set = m.set.withDefaults()
	if m.set.OnStop != OnStopLeave && m.set.OnStop != OnStopLinger {
		return nil, fmt.Errorf("on stop %q: want %q or %q", m.set.OnStop, OnStopLeave, OnStopLinger)
	}
	m.log = m.set.Logger.With("logger", "fleet", "master", m.set.Name)
	m.status = &status{}
	m.budget = newStopBudget(StopBudget)
	linger := time.Duration(0)
	if m.set.OnStop == OnStopLinger {
		linger = m.set.Linger
	}
	member, err := membership.New(st, membership.Config{
		Kind: store.KindMaster, Name: m.set.Name, Version: m.set.Version,
		TTL: m.set.TTL, Interval: m.set.BeatInterval, Logger: m.log,
		Report:       func() (string, any) { return m.status.load() },
		Linger:       linger,
		LeaveContext: leaveOnBudget(m.budget),
	})
	if err != nil {
		return nil, fmt.Errorf("master %q: %w", m.set.Name, err)
	}
	m.member = member
	m.state = newLatest[stateSnap]()
	m.workload = newLatest[map[string]balancer.QueueWorkload]()
	m.kills = newLatest[[]string]()
	m.suspects = newLatest[suspectSnap]()
	m.releases = &fifo[*releaseReq]{}
	var queues []string
	for _, sup := range supervisors {
		for _, q := range sup.Queues {
			if !slices.Contains(queues, q) {
				queues = append(queues, q)
			}
		}
	}

	alerts := newAlerts(m.set.OnLongWait, m.log, m.budget)
	m.supervision = newSupervision(m.spawner, supervisors, m.set, m.log, member, m.status, m.state, m.workload, m.kills, m.releases, m.suspects)
	m.services = []service{
		member,
		newHousekeeping(st, m.set, m.log, member, m.budget, m.releases, m.kills, m.suspects, queues),
		newSharedState(st, m.set.Tick, m.log, member.StartedAt, m.state),
		newWorkload(st, m.set.BalanceCooldown, m.log, m.workload),
		alerts,
		newDuties(st, m.set, m.log, member.Instance, member.StartedAt, m.budget, alerts.offer),
		newPeriodicSvc(st, m.set, m.log, member.Instance),
		newHeldWatch(st, m.set, m.log),
		m.supervision,
	}
	m.status.state.Store("starting")
	m.supervision.publish()
	return m, nil
}

// Name is the master's name in fleet_masters.
func (m *Master) Name() string { return m.set.Name }

// Instance is this master's instance id, the key of its row and the
// reserved_master of its workers' jobs.
func (m *Master) Instance() string { return m.member.Instance() }

// Membership is the master's membership service (its view, beat counts).
func (m *Master) Membership() *membership.Service { return m.member }

// Run supervises until ctx ends or a terminate request made after this
// master started arrives; then it stops every worker gracefully (they finish
// their running jobs within StopTimeout), and leaves the fleet (or lingers)
// once the last of them has exited and its jobs are released. It starts
// the services in order and stops them in reverse (see the package doc);
// when one fails to start, those started are stopped and its error
// returned.
func (m *Master) Run(ctx context.Context) (Summary, error) {
	if !m.ran.CompareAndSwap(false, true) {
		return Summary{}, errors.New("master: Run called twice")
	}
	defer m.budget.release()
	n, err := svclife.StartAll(ctx, m.services, &m.sig.lifecycle)
	if err != nil {
		svclife.StopAll(m.services[:n], &m.sig.lifecycle)
		return Summary{}, err
	}
	m.log.Info("master started", "instance", m.Instance(), "supervisors", len(m.supervision.sups), "ttl", m.set.TTL)
	select {
	case <-ctx.Done():
	case <-m.supervision.Done():
	}
	svclife.StopAll(m.services, &m.sig.lifecycle)
	sum, err := m.supervision.Result()
	m.log.Info("master stopped", "started", sum.Started, "recycled", sum.Recycled,
		"crashed", sum.Crashed, "jobs", sum.Jobs, "on_stop", m.set.OnStop)
	return sum, err
}

// StopBudget bounds what a master does after its last child exited: with
// a healthy database it takes milliseconds; with a frozen one, the master
// exits StopBudget after its children.
const StopBudget = 5 * time.Second
