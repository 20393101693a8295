// Package membership keeps a process's row in the fleet's membership
// (fleet_masters) beating and holds the latest view of every member.
//
// One statement per beat writes the member's own row and returns every row
// with the database's now() as the view's At; liveness is always measured
// against At, never against the local clock, so a host whose clock is off
// sees and is seen like any other. A beat that fails or runs past its time
// limit keeps the last view; it is counted, and logged at most once a
// minute. Masters and workers started without a master both run one.
//
// It holds one service, Service, the beat, a lifecycle.Service like every
// other of a master or a worker: Start (the first beat, then a goroutine
// the service owns beating every interval) and Stop (the end of the beat,
// waiting for one in flight, then the row's leave or linger, under a
// time limit). In a master it is the first service of the ordered list,
// started first and stopped last (see package master).
//
// The rules of release (README, "Who releases whose jobs"):
//   - a job is released only when the member row of its holder's master (or
//     of the holder itself, for a worker without a master) has expired on
//     the database clock;
//   - a member that is not live cannot claim: the claim statement checks its
//     row, and a worker fenced for a ttl exits;
//   - a member releases others' jobs only once its own beats have succeeded
//     without a gap for a whole ttl (Trusted), so after an outage, when
//     every row expired together, nobody is presumed dead for it. A beat
//     that finds its own row older than its last acknowledged beat (the
//     database lost acknowledged writes: a failover to a standby that
//     lagged) starts the run again too: the other rows lost their latest
//     beats with it, and may look expired for a while.
package membership

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/internal/backoff"
	"github.com/fleet-go/fleet/internal/defaults"
	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/store"
)

// MaxReportBytes caps the encoded report a member writes with each beat.
const MaxReportBytes = 8 << 10

// Config describes a member.
type Config struct {
	// Kind is store.KindMaster or store.KindWorker.
	Kind string
	// Name is the member's name (several instances may share one).
	Name string
	// Version is reported in its row.
	Version string
	// TTL is how long the row outlives its last beat (default 10 s).
	TTL time.Duration
	// Interval is the time between beats (default 1 s); it must be below
	// half the TTL.
	Interval time.Duration
	// Report returns the member's state and report before each beat.
	Report func() (state string, report any)
	// Logger receives the member's logs.
	Logger *slog.Logger
	// Now is the local clock (default time.Now): the age of the view, the
	// duration of a beat and the pace of the failure log read it. Liveness
	// never does; it is measured on the database clock.
	Now func() time.Time
	// Linger, when positive, makes Stop rewrite the row as draining to
	// live that long; zero: Stop deletes it (leave).
	Linger time.Duration
	// LeaveContext returns the context of Stop's leave (or linger)
	// statement, such as a process's stop budget; nil: a context of its
	// own. Either way the statement is cut after LeaveTimeout.
	LeaveContext func() context.Context
}

// LeaveTimeout bounds the statement that deletes the row, or rewrites it
// to linger, at Stop; a row left behind expires on its own after the ttl.
const LeaveTimeout = 5 * time.Second

// serviceName is the service's name in a process's ordered list.
const serviceName = "membership"

var _ lifecycle.Service = (*Service)(nil)

// Validate checks the TTL and interval together: the interval must be
// below half the TTL, so that one lost beat never expires the row.
func Validate(ttl, interval time.Duration) error {
	if ttl <= 0 || interval <= 0 {
		return errors.New("the ttl and the beat interval must be positive")
	}
	if interval >= ttl/2 {
		return fmt.Errorf("the beat interval (%s) must be below half the ttl (%s)", interval, ttl)
	}
	return nil
}

// ValidName reports why name cannot name a member (nil when it can): it
// must be non-empty, at most 200 bytes, and hold no tab, newline or brace,
// so that every listing shows it on one line and unambiguously.
func ValidName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errors.New("the name is empty")
	case len(name) > 200:
		return fmt.Errorf("the name is %d bytes long; at most 200", len(name))
	case strings.ContainsAny(name, "\t\n\r{}"):
		return fmt.Errorf("the name %q holds a tab, newline or brace", name)
	}
	return nil
}

// Service is one member's beat. Build it with New, Start it once; Stop
// is safe before Start, twice and from several goroutines at once.
type Service struct {
	st       *store.Store
	cfg      Config
	log      *slog.Logger
	instance string
	host     string

	kick chan struct{}
	life lifecycle.Lifecycle

	mu          sync.Mutex
	view        store.View
	viewAt      time.Time // local monotonic time of the last successful beat
	streakStart time.Time // database time the current run of successful beats began
	lastAt      time.Time // database time of the last successful beat
	failing     int       // beat failures not yet logged
	loggedAt    time.Time
	dupSeen     map[string]bool
	joined      bool      // the first beat succeeded: Stop leaves
	startedAt   time.Time // the row's started_at, database clock
	leaveErr    error

	beatErrors  atomic.Uint64
	beatRetries atomic.Uint64
	duplicates  atomic.Uint64
	durations   *histogram
	stopOnce    sync.Once
}

// New validates cfg and returns a member service.
func New(st *store.Store, cfg Config) (*Service, error) {
	cfg.TTL = cmp.Or(cfg.TTL, defaults.TTL)
	cfg.Interval = cmp.Or(cfg.Interval, defaults.BeatInterval)
	cfg.Kind = cmp.Or(cfg.Kind, store.KindMaster)
	if err := Validate(cfg.TTL, cfg.Interval); err != nil {
		return nil, err
	}
	if err := ValidName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.Report == nil {
		cfg.Report = func() (string, any) { return "running", nil }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	host, _ := os.Hostname()
	return &Service{
		st: st, cfg: cfg, instance: NewInstance(), host: cmp.Or(host, "localhost"),
		log:     cfg.Logger,
		kick:    make(chan struct{}, 1),
		dupSeen: map[string]bool{}, durations: newHistogram(),
	}, nil
}

// NewInstance returns a random instance id (16 hex digits).
func NewInstance() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Instance is this process's instance id: the key of its row and what its
// workers' leases carry as reserved_master.
func (s *Service) Instance() string { return s.instance }

// Name is the service's name in a process's ordered list: "membership".
func (s *Service) Name() string { return serviceName }

// MemberName is the member's name, as its row says.
func (s *Service) MemberName() string { return s.cfg.Name }

// StartedAt is when this member's row was created, by the database clock
// (zero before Start).
func (s *Service) StartedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startedAt
}

// TTL is the row's ttl.
func (s *Service) TTL() time.Duration { return s.cfg.TTL }

// BeatTimeout is the time limit of one beat: a third of what is left of
// the ttl after one interval, so that a slow beat is given up while a retry
// can still keep the row alive.
func (s *Service) BeatTimeout() time.Duration { return (s.cfg.TTL - s.cfg.Interval) / 3 }

// CheckReport encodes the report the member would send now and fails if it
// is over MaxReportBytes; Start calls it before the first beat.
func (s *Service) CheckReport() error {
	_, _, err := s.report()
	return err
}

func (s *Service) report() (string, json.RawMessage, error) {
	state, r := s.cfg.Report()
	if r == nil {
		return state, nil, nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return state, nil, fmt.Errorf("encode the membership report: %w", err)
	}
	if len(b) > MaxReportBytes {
		return state, nil, fmt.Errorf("the membership report is %d bytes encoded; at most %d (fewer supervisors or queues per master)", len(b), MaxReportBytes)
	}
	return state, b, nil
}

// Start beats once and fails if that beat fails (a boot error), leaving
// nothing to leave; then it beats every interval from a goroutine of its
// own until Stop. ctx bounds nothing: the first beat has its own time
// limit, and the beat runs until Stop.
func (s *Service) Start(ctx context.Context) error {
	sctx, end, err := s.life.Begin(ctx, serviceName)
	if err != nil {
		return err
	}
	if err := s.CheckReport(); err != nil {
		end()
		return err
	}
	if err := s.beatWithin(context.WithoutCancel(sctx), max(s.BeatTimeout(), FirstBeatTimeout)); err != nil {
		end()
		return fmt.Errorf("first beat of %s %s failed: %w", s.cfg.Kind, s.cfg.Name, err)
	}
	s.mu.Lock()
	s.joined = true
	if me, ok := s.view.Find(s.instance); ok {
		s.startedAt = me.StartedAt
	}
	s.mu.Unlock()
	go func() {
		defer end()
		s.loop(sctx)
	}()
	return nil
}

// Kick asks for a beat now (a state change), without waiting for it.
func (s *Service) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// loop beats every interval, and at a Kick, until ctx (the service's) is
// cancelled. A beat in flight is not cut by it: see Stop.
func (s *Service) loop(ctx context.Context) {
	t := time.NewTimer(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-t.C:
		}
		if err := s.beat(ctx); err != nil {
			s.failed(err)
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(s.cfg.Interval)
	}
}

// Pauses before a beat the database refused for now is tried again
// within its time limit (see beatWithin).
const (
	beatRetryBase = 5 * time.Millisecond
	beatRetryMax  = 100 * time.Millisecond
)

// FirstBeatTimeout is the least time limit of the first beat, Start's boot
// check. No peer relies on the row before it exists, so a first beat
// slowed by a cold pool or a busy server is waited for rather than failed
// as a boot error.
const FirstBeatTimeout = 10 * time.Second

// beat writes the row and takes the view.
func (s *Service) beat(ctx context.Context) error {
	return s.beatWithin(context.WithoutCancel(ctx), s.BeatTimeout())
}

// beatWithin is a beat under the time limit d and ctx.
func (s *Service) beatWithin(ctx context.Context, d time.Duration) error {
	state, report, err := s.report()
	if err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := s.cfg.Now()
	params := store.MemberBeatParams{
		Instance: s.instance, Kind: s.cfg.Kind, Name: s.cfg.Name, Host: s.host, PID: os.Getpid(),
		Version: s.cfg.Version, State: state, Report: report, TTL: s.cfg.TTL,
	}
	trusted := s.Trusted()
	s.mu.Lock()
	params.Renew = !s.lastAt.IsZero()
	s.mu.Unlock()
	v, err := s.st.MemberBeat(bctx, params, trusted)
	// A database that answered with a passing refusal (the statement
	// timeout of a busy server, a deadlock) is asked again at once, after
	// a short pause, within the beat's time limit: the row must not expire
	// because statements are slow.
	pause := backoff.Exponential{Base: beatRetryBase, Max: beatRetryMax}
	for err != nil && store.ClassifyError(err) == store.ErrorTransient && bctx.Err() == nil {
		d := pause.Next()
		if backoff.Sleep(bctx, backoff.Between(d/2, d)) != nil {
			break
		}
		s.beatRetries.Add(1)
		v, err = s.st.MemberBeat(bctx, params, trusted)
	}
	if _, mine := v.Find(s.instance); err == nil && params.Renew && !mine {
		// The row is gone (a failover to a standby that lagged, or
		// peers pruned it while this process was frozen): it is written
		// again at once.
		params.Renew = false
		v, err = s.st.MemberBeat(bctx, params, trusted)
	}
	s.durations.observe(s.cfg.Now().Sub(start).Seconds())
	if err != nil {
		s.beatErrors.Add(1)
		s.mu.Lock()
		s.streakStart = time.Time{}
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	acked := s.lastAt
	lost := !acked.IsZero() && v.Prev.Before(acked)
	if s.streakStart.IsZero() || v.At.Sub(s.lastAt) > s.cfg.TTL || lost {
		// The first beat, or the first after a failure or a gap longer
		// than the ttl (this process was frozen, or the database away),
		// or after the database lost beats it had acknowledged: the run
		// of successful beats starts again.
		s.streakStart = v.At
	}
	s.lastAt = v.At
	s.view, s.viewAt = v, s.cfg.Now()
	failing := s.failing
	s.failing = 0
	s.mu.Unlock()
	if failing > 0 {
		s.log.Info("beat succeeded again", "failures", failing)
	}
	if lost {
		s.log.Warn("the database lost beats of this member it had acknowledged (a failover to a standby that lagged, or a restore): nobody is presumed gone for a ttl",
			"acknowledged_beat", acked, "database_has", v.Prev)
	}
	s.duplicatesIn(v)
	return nil
}

// failed counts a failed beat and logs at most once a minute, saying how
// many failures the line stands for.
func (s *Service) failed(err error) {
	s.mu.Lock()
	s.failing++
	n := s.failing
	now := s.cfg.Now()
	due := s.loggedAt.IsZero() || now.Sub(s.loggedAt) >= time.Minute
	if due {
		s.loggedAt = now
	}
	s.mu.Unlock()
	if due {
		s.log.Warn("beat failed; work goes on with the last view, retrying every interval",
			"failures", n, "view_age", s.ViewAge().Round(time.Millisecond), "err", err)
	}
}

// duplicatesIn warns once per other live instance that shares this
// member's name.
func (s *Service) duplicatesIn(v store.View) {
	for _, m := range v.Live(s.cfg.Kind) {
		if m.Name != s.cfg.Name || m.Instance == s.instance {
			continue
		}
		s.mu.Lock()
		seen := s.dupSeen[m.Instance]
		s.dupSeen[m.Instance] = true
		s.mu.Unlock()
		if !seen {
			s.duplicates.Add(1)
			s.log.Warn("fleet_duplicate_master_name: another live instance runs under this name; each keeps its own jobs",
				"name", m.Name, "other_instance", m.Instance, "other_host", m.Host, "other_pid", m.PID)
		}
	}
}

// View returns the last view (zero before the first beat).
func (s *Service) View() store.View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view
}

// ViewAge is how long ago the last successful beat was, by the local
// clock (Config.Now).
func (s *Service) ViewAge() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.viewAt.IsZero() {
		return 0
	}
	return s.cfg.Now().Sub(s.viewAt)
}

// Trusted reports whether this member's beats have succeeded, without a
// gap or a failure, for at least a whole ttl by the database clock: only
// then may it take another member's silence for death.
func (s *Service) Trusted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.streakStart.IsZero() && s.lastAt.Sub(s.streakStart) >= s.cfg.TTL
}

// BeatErrors counts failed beats.
func (s *Service) BeatErrors() uint64 { return s.beatErrors.Load() }

// BeatRetries counts the statements of beats tried again within their
// time limit after the database refused them for now (a statement
// timeout, a deadlock): see store.ErrorTransient.
func (s *Service) BeatRetries() uint64 { return s.beatRetries.Load() }

// Duplicates counts other live instances seen under this member's name.
func (s *Service) Duplicates() uint64 { return s.duplicates.Load() }

// BeatDurations returns the beat-duration histogram: cumulative counts per
// upper bound (seconds), the count and the sum.
func (s *Service) BeatDurations() (buckets map[float64]uint64, count uint64, sum float64) {
	return s.durations.snapshot()
}

// Stop ends the beat and leaves the fleet: with Config.Linger the row is
// rewritten as draining to live that long; otherwise it is deleted. The
// statement runs on Config.LeaveContext, within LeaveTimeout; a row it
// could not delete expires on its own after the ttl (LeaveErr says why).
// A beat in flight is waited for, not cancelled: it is bounded by the
// beat's own time limit (BeatTimeout). A beat cut on the client may still
// be run by the server after the leave; it only renews a row that exists
// (store.MemberBeatParams.Renew), so it does not bring a deleted row back
// (a lingering one may be rewritten by it, expiring a ttl after it). Call it only once nothing of this member holds a job. It is
// safe before Start (no leave then, nor after a Start that failed), twice
// and from several goroutines at once.
func (s *Service) Stop() {
	s.stopOnce.Do(func() {
		s.life.Halt()
		s.mu.Lock()
		joined := s.joined
		s.mu.Unlock()
		if !joined {
			return
		}
		base := context.Background()
		if s.cfg.LeaveContext != nil {
			base = s.cfg.LeaveContext()
		}
		ctx, cancel := context.WithTimeout(base, LeaveTimeout)
		defer cancel()
		var err error
		if s.cfg.Linger > 0 {
			err = s.st.MemberLinger(ctx, s.instance, s.cfg.Linger)
		} else {
			err = s.st.MemberDelete(ctx, s.instance)
		}
		if err != nil {
			s.log.Warn("leave the fleet failed; the row expires on its own", "err", err)
		}
		s.mu.Lock()
		s.leaveErr = err
		s.mu.Unlock()
	})
}

// LeaveErr is the error of Stop's leave (or linger) statement: nil before
// Stop, after a leave that succeeded, and when there was nothing to leave.
func (s *Service) LeaveErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaveErr
}
