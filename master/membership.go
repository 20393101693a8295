package master

import (
	"context"
	"fmt"
	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"log/slog"
	"sync"
	"time"

	"github.com/fleet-go/fleet/membership"
	"github.com/fleet-go/fleet/store"
)

// peers is what the other services read of the membership: this master's
// instance, its latest view of the fleet (on the database clock), and
// whether that view may be trusted to presume a silent member gone.
// *membership.Service is the real one; tests may give a service another.
type peers interface {
	Instance() string
	View() store.View
	Trusted() bool
}

// beater is what supervision needs of the membership: peers, and a beat
// at once when the state it publishes changed.
type beater interface {
	peers
	Kick()
}

// membershipSvc is the first service and the last: the master's beat
// (package membership). Its Start is the first beat, the boot check,
// which gives the instance its row before any child claims under it. Its
// Stop comes after every other service's, once the last child has exited
// and housekeeping released what the children held: it ends the beat and
// deletes the row, or rewrites it to linger, on the stop budget.
type membershipSvc struct {
	member *membership.Service
	linger time.Duration // 0: leave
	budget *stopBudget
	log    *slog.Logger

	mu        sync.Mutex
	started   bool
	stopped   bool
	startedAt time.Time // the row's started_at, database clock
}

func newMembershipSvc(member *membership.Service, linger time.Duration, budget *stopBudget, log *slog.Logger) *membershipSvc {
	return &membershipSvc{member: member, linger: linger, budget: budget, log: log}
}

func (s *membershipSvc) Name() string { return "membership" }

// Start beats once, failing when that beat fails, then beats from the
// membership's own goroutine until Stop.
func (s *membershipSvc) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return fmt.Errorf("%s: %w", s.Name(), svclife.ErrStopped)
	case s.started:
		return fmt.Errorf("%s: %w", s.Name(), svclife.ErrStarted)
	}
	s.started = true
	if err := s.member.Start(ctx); err != nil {
		s.stopped = true
		return err
	}
	if me, ok := s.member.View().Find(s.member.Instance()); ok {
		s.startedAt = me.StartedAt
	}
	return nil
}

// StartedAt is when this master's row was created, by the database
// clock (zero before Start): terminate requests older than it are not
// for this master, and the minutes before it were not watched by it.
func (s *membershipSvc) StartedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startedAt
}

// Stop ends the beat and leaves the fleet (or lingers) within the stop
// budget; a row that could not be deleted expires on its own after the
// ttl. A beat in flight is waited for, not cancelled: it is bounded by
// the beat's own time limit (BeatTimeout, 3 s with the defaults), and a
// beat cut on the client may still be written by the server after the
// leave, bringing the row back for a ttl.
func (s *membershipSvc) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if !s.started {
		return
	}
	s.budget.start()
	if err := s.member.Stop(s.budget.context(), s.linger); err != nil {
		s.log.Warn("leave the fleet failed; the row expires on its own", "err", err)
	}
}
