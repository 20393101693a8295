package master

import (
	"context"
	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"log/slog"
	"strings"
	"time"

	"github.com/fleet-go/fleet/internal/ratelog"
	"github.com/fleet-go/fleet/store"
)

// sharedState is the service that reads, every tick, what the fleet's
// operators set in fleet_state: pause flags (all, per supervisor, per
// queue) and terminate requests. It hands each read to supervision as
// the latest stateSnap; supervision applies it. Its Start reads once, so
// that the first children start with the pause state of the fleet.
type sharedState struct {
	st        *store.Store
	log       *slog.Logger
	logs      ratelog.Log
	tick      time.Duration
	startedAt func() time.Time // the master's row's, by the database clock

	out *latest[stateSnap] // to supervision

	since time.Time // startedAt, read at Start

	lc  svclife.Lifecycle
	sig struct {
		read svclife.Signal[stateSnap] // a snapshot handed to supervision
	}
}

// stateSnap is what the shared-state service read.
type stateSnap struct {
	ok        bool
	keys      map[string]bool
	queues    map[string]bool
	terminate bool
}

func newSharedState(st *store.Store, tick time.Duration, log *slog.Logger, startedAt func() time.Time, out *latest[stateSnap]) *sharedState {
	return &sharedState{st: st, log: log, tick: tick, startedAt: startedAt, out: out}
}

func (s *sharedState) Name() string { return "shared state" }

// Start reads the state once, then every tick until Stop.
func (s *sharedState) Start(ctx context.Context) error {
	sctx, end, err := s.lc.Begin(ctx, s.Name())
	if err != nil {
		return err
	}
	s.since = s.startedAt()
	s.read(sctx)
	go func() {
		defer end()
		svclife.TickEvery(sctx, s.tick, s.read, nil)
	}()
	return nil
}

// Stop cancels a read in flight and waits.
func (s *sharedState) Stop() { s.lc.Halt() }

// readTimeout bounds one read: three ticks, at least 3 s.
func (s *sharedState) readTimeout() time.Duration { return max(s.tick*3, 3*time.Second) }

// read reads pause flags and terminate requests and hands them to
// supervision. A terminate request counts only when it was made after
// this master started.
func (s *sharedState) read(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, s.readTimeout())
	defer cancel()
	rows, err := s.st.StateList(rctx, "pause:", store.StateTerminate)
	if err != nil {
		s.logs.Fail(s.log, "state", "read fleet state failed; keeping the last pause state", "err", err)
		return
	}
	s.logs.OK(s.log, "state", "reading fleet state works again")
	snap := stateSnap{ok: true, keys: map[string]bool{}, queues: map[string]bool{}}
	for _, r := range rows {
		snap.keys[r.Key] = true
		if r.Key == store.StateTerminate && r.UpdatedAt.After(s.since) {
			snap.terminate = true
		}
		if q, ok := strings.CutPrefix(r.Key, store.StatePauseQueuePrefix); ok {
			snap.queues[q] = true
		}
	}
	s.out.put(snap)
	s.sig.read.Send(snap)
}
