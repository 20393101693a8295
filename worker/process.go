package worker

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fleet-go/fleet/internal/backoff"
	"github.com/fleet-go/fleet/internal/defaults"
	"github.com/fleet-go/fleet/membership"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
)

// Waiting for the database at start: the first retry comes after
// waitBase (at random from half of it), each later one after twice the
// delay before, up to waitMax; the outage is logged again at most every
// waitLogEvery.
const (
	waitBase     = 500 * time.Millisecond
	waitMax      = 4 * time.Second
	waitLogEvery = time.Minute
)

// ProcessConfig shapes a Process.
type ProcessConfig struct {
	// Worker is the worker the process runs. Its Logger and Reports serve
	// the process too: the wait for the database logs there and reports
	// there that it waits.
	Worker Config
	// Commands carries the master's commands, one @fleet line each (see
	// spawner.FormatCommand): the process's stdin under a master. Its end
	// means the master is gone: the worker then stops, finishing its
	// running jobs. Nil: no commands, as for a worker run by hand.
	Commands io.Reader
	// Version is the binary's version, which a hand-run worker's
	// membership row shows.
	Version string
	// MemberTTL is the ttl of a hand-run worker's membership row
	// (fleet.master_ttl_secs; 0: 10 s, its default). The row is beaten
	// every quarter of it, and the worker stops once fenced out that long.
	MemberTTL time.Duration
}

// Process is the runtime of a worker process, what `app fleet:work` does
// around its one Worker: it applies the master's commands from stdin
// (pause, continue, pause-queues, stop; stdin's end is a stop), holding
// them while the worker does not exist yet; under a master it waits for a
// database that does not answer at start rather than exit, reporting to
// the master that it waits (Connect); and a worker without a master, run
// by hand, keeps a membership row of its own for as long as it runs (Run).
// Opening the connection pool is the caller's, which passes Connect the
// function that does it.
type Process struct {
	cfg  ProcessConfig
	log  *slog.Logger
	sink *commandSink
}

// NewProcess returns the process cfg describes, and starts reading
// cfg.Commands when set. The reader is the process's: it applies each
// command as it arrives, and ends when Commands ends, which for stdin may
// be only at the process's exit (a read cannot be cut short without
// closing what it reads, which is the caller's).
func NewProcess(cfg ProcessConfig) *Process {
	p := &Process{
		cfg:  cfg,
		log:  cmp.Or(cfg.Worker.Logger, slog.Default()),
		sink: newCommandSink(),
	}
	if cfg.Commands != nil {
		go p.readCommands(cfg.Commands)
	}
	return p
}

// readCommands applies @fleet commands from the master until in ends; then
// the master is gone and the worker stops.
func (p *Process) readCommands(in io.Reader) {
	sc := bufio.NewScanner(in)
	warned := false
	for sc.Scan() {
		c, err := spawner.ParseCommand(sc.Text())
		if err != nil {
			if !warned {
				p.log.Warn("ignoring a malformed line from the master", "err", err)
				warned = true
			}
			continue
		}
		p.sink.apply(c)
	}
	p.log.Info("master closed stdin: stopping")
	p.sink.apply(spawner.Command{Type: spawner.CommandStop})
}

// Connect calls open, which connects to the database, and reports whether
// it succeeded. A worker run by hand (Worker.Master empty) returns open's
// error. One started by a master whose database does not answer
// (unreachable(err) holds) waits for it rather than exit, since a crash
// would cost its group a restart backoff for an outage that is nobody's
// fault: it calls open again after a capped, jittered backoff (half a
// second at first, doubling up to 4 s) until it succeeds, fails otherwise
// (that error is returned), ctx ends or the master says stop (then it
// returns false and nil). The outage is logged once, then at most once a
// minute with the number of tries, and once when the database is back.
// After every failed try it reports why it waits (spawner.ReportWaiting),
// so that its master does not take it for hung.
func (p *Process) Connect(ctx context.Context, open func(context.Context) error, unreachable func(error) bool) (bool, error) {
	err := open(ctx)
	switch {
	case err == nil:
		return true, nil
	case p.cfg.Worker.Master == "" || !unreachable(err):
		return false, err
	}
	p.log.Warn("cannot connect to the database at start; waiting for it", "err", err)
	p.waiting(err)
	// A stop from the master ends the wait as ctx's end does.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.sink.stopped, cancel)()
	delay := backoff.Exponential{Base: waitBase, Max: waitMax}
	now := p.cfg.Worker.Now
	if now == nil {
		now = time.Now
	}
	tries, loggedAt := 1, now()
	for {
		d := delay.Next()
		if backoff.Sleep(wctx, backoff.Between(d/2, d)) != nil {
			return false, nil
		}
		err := open(ctx)
		tries++
		if err == nil {
			p.log.Info("the database is reachable: starting", "tries", tries)
			return true, nil
		}
		if !unreachable(err) {
			return false, err
		}
		p.waiting(err)
		if now().Sub(loggedAt) >= waitLogEvery {
			p.log.Warn("the database is still unreachable; waiting for it", "tries", tries, "err", err)
			loggedAt = now()
		}
	}
}

// waiting reports that the process waits for the database, and why.
func (p *Process) waiting(err error) {
	if report := p.cfg.Worker.Reports; report != nil {
		report(spawner.Report{Type: spawner.ReportWaiting, PID: os.Getpid(), Waiting: err.Error()})
	}
}

// Run runs the worker on st with the handlers in jobs until it stops, and
// returns what Worker.Run returns. The master's commands received so far
// are applied to it first (a stop received while Connect waited stops it
// at once), and every later one as it arrives.
//
// A worker without a master (Worker.Master empty), run by hand, keeps a
// membership row of its own (kind store.KindWorker, named after the
// worker, DefaultName() when it has no name) from before it claims until
// it has returned, and hangs its leases on that row: masters then know
// that it is alive, never release a job it still runs however long its
// timeout, and release its jobs once it is gone. The row is removed at
// the end; when that fails, it expires on its own.
func (p *Process) Run(ctx context.Context, st *store.Store, jobs *queue.Registry) (Result, error) {
	cfg := p.cfg.Worker
	if cfg.Master == "" {
		if cfg.Name == "" {
			cfg.Name = DefaultName()
		}
		member, err := p.join(ctx, st, cfg)
		if err != nil {
			return Result{}, err
		}
		defer p.leave(member)
		cfg.Master, cfg.MasterTTL = member.Instance(), member.TTL()
	}
	w, err := New(st, jobs, cfg)
	if err != nil {
		return Result{}, err
	}
	p.sink.attach(w)
	return w.Run(ctx)
}

// join writes and starts beating the membership row of the hand-run
// worker cfg describes.
func (p *Process) join(ctx context.Context, st *store.Store, cfg Config) (*membership.Service, error) {
	ttl := cmp.Or(p.cfg.MemberTTL, defaults.TTL)
	member, err := membership.New(st, membership.Config{
		Kind: store.KindWorker, Name: cfg.Name, Version: p.cfg.Version, TTL: ttl,
		Interval: max(ttl/4, 10*time.Millisecond), Logger: p.log,
		Report: func() (string, any) { return "running", map[string]any{"queues": cfg.Queues} },
	})
	if err != nil {
		return nil, fmt.Errorf("worker %q: %w", cfg.Name, err)
	}
	if err := member.Start(ctx); err != nil {
		return nil, err
	}
	return member, nil
}

// leave ends the hand-run worker's beat and removes its membership row
// (within membership.LeaveTimeout; the membership logs a failure, after
// which the row expires on its own).
func (p *Process) leave(member *membership.Service) {
	member.Stop()
}

// commandSink applies the master's commands to the worker, and holds them
// while the worker does not exist yet (the database is away at start): a
// stop then ends the wait, and the pause state is applied on attach.
type commandSink struct {
	mu           sync.Mutex
	w            *Worker
	stopped      context.Context // ends at the first stop
	stop         context.CancelFunc
	paused       *bool
	pausedQueues []string
	queuesSet    bool
}

func newCommandSink() *commandSink {
	ctx, stop := context.WithCancel(context.Background())
	return &commandSink{stopped: ctx, stop: stop}
}

func (s *commandSink) apply(c spawner.Command) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Type == spawner.CommandStop {
		s.stop()
	}
	if w := s.w; w != nil {
		switch c.Type {
		case spawner.CommandPause:
			w.Pause()
		case spawner.CommandContinue:
			w.Continue()
		case spawner.CommandStop:
			w.Stop()
		case spawner.CommandPauseQueues:
			w.PauseQueues(c.Queues)
		}
		return
	}
	switch c.Type {
	case spawner.CommandPause, spawner.CommandContinue:
		p := c.Type == spawner.CommandPause
		s.paused = &p
	case spawner.CommandPauseQueues:
		s.pausedQueues, s.queuesSet = c.Queues, true
	}
}

// attach hands the commands held so far to w, and every later one.
func (s *commandSink) attach(w *Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w = w
	if s.paused != nil {
		if *s.paused {
			w.Pause()
		} else {
			w.Continue()
		}
	}
	if s.queuesSet {
		w.PauseQueues(s.pausedQueues)
	}
	if s.stopped.Err() != nil {
		w.Stop()
	}
}
