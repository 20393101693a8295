package master

import (
	"context"
	"errors"
	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/membership"
)

// newMember is the membership service as a master builds it: leaving (or
// lingering) on the stop budget.
func newMember(t *testing.T, e *svcEnv, linger time.Duration, report func() (string, any)) *membership.Service {
	t.Helper()
	ms, err := membership.New(e.st, membership.Config{Name: "m", TTL: e.set.TTL, Interval: e.set.Tick, Logger: e.log, Report: report,
		Linger: linger, LeaveContext: leaveOnBudget(e.budget)})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// Start is the first beat: the row exists when it returns, and StartedAt
// is the row's. Stop deletes it; a later Start fails.
func TestMembershipServiceBeatsFromStartAndLeavesOnStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	s := newMember(t, e, 0, nil)
	if !s.StartedAt().IsZero() {
		t.Fatal("a start time before Start")
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var startedAt time.Time
	if err := e.pool.QueryRow(context.Background(), `SELECT started_at FROM fleet_masters WHERE instance = $1`, s.Instance()).Scan(&startedAt); err != nil {
		t.Fatalf("no row after Start: %v", err)
	}
	if !s.StartedAt().Equal(startedAt) {
		t.Errorf("StartedAt %v, want the row's %v", s.StartedAt(), startedAt)
	}
	s.Stop()
	s.Stop()
	if n := e.count(t, `SELECT count(*) FROM fleet_masters`); n != 0 {
		t.Fatal("the row outlived Stop")
	}
	if err := s.Start(context.Background()); !errors.Is(err, svclife.ErrStopped) {
		t.Fatalf("Start after Stop: %v", err)
	}
}

// With a linger, Stop rewrites the row as draining, to live that long.
func TestMembershipServiceLingers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	s := newMember(t, e, time.Minute, nil)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if n := e.count(t, `SELECT count(*) FROM fleet_masters WHERE instance = $1 AND state = 'draining'
		AND expires_at > now() + interval '50 seconds'`, s.Instance()); n != 1 {
		t.Fatal("no lingering draining row")
	}
}

// A first beat that fails fails Start, and leaves nothing to stop.
func TestMembershipServiceStartFailure(t *testing.T) {
	t.Parallel()
	// A budget of an hour: a Stop that waited it out would be a hang.
	e := newEnv(t, time.Hour)
	s := newMember(t, e, 0, func() (string, any) { return "starting", strings.Repeat("x", membership.MaxReportBytes) })
	if err := s.Start(context.Background()); err == nil {
		t.Fatal("a start whose report is over the cap succeeded")
	}
	stopPromptly(t, s)
	if n := e.count(t, `SELECT count(*) FROM fleet_masters`); n != 0 {
		t.Fatal("a row was written")
	}
}
