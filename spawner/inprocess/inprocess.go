// Package inprocess provides a spawner.Spawner that runs real workers as
// goroutines against the real database, so a master test gets real claiming
// and running without processes. It is a package of its own because it
// builds workers, and package worker imports package spawner.
package inprocess

import (
	"context"
	"errors"
	"sync"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/worker"
)

// Spawner runs each worker it spawns as a goroutine.
type Spawner struct {
	st       *store.Store
	jobs     *queue.Registry
	defaults worker.Config
	wg       sync.WaitGroup
}

var _ spawner.Spawner = (*Spawner)(nil)

// New returns a spawner whose workers run jobs from st with the handlers in
// jobs. defaults fills what a Spec leaves open (poll interval, timeout
// grace, logger), as worker.SpecConfig says.
func New(st *store.Store, jobs *queue.Registry, defaults worker.Config) *Spawner {
	return &Spawner{st: st, jobs: jobs, defaults: defaults}
}

// Wait blocks until every worker it started has returned.
func (s *Spawner) Wait() { s.wg.Wait() }

// Spawn starts a worker goroutine for spec. Its reports and its exit are
// sent to events; the goroutine ends after sending the exit. The exit
// carries the status fleet:work would have exited with, and counts as
// spawner.ExitFor decides, as a process's exit does.
func (s *Spawner) Spawn(ctx context.Context, spec spawner.Spec, events chan<- spawner.Event) (spawner.Process, error) {
	cfg := worker.SpecConfig(spec, s.defaults)
	p := &inProcess{spec: spec}
	var exit worker.Exit // fleet:work's exit policy
	cfg.Reports = exit.Reports(func(r spawner.Report) {
		events <- spawner.Event{Process: p, Report: &r}
	})
	w, err := worker.New(s.st, s.jobs, cfg)
	if err != nil {
		return nil, err
	}
	p.w = w
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	s.wg.Go(func() {
		defer cancel()
		res, err := w.Run(runCtx)
		code := exit.Code(err) // as fleet:work exits
		events <- spawner.Event{Process: p, Exit: &spawner.Exit{
			Reason: spawner.ExitFor(res.Reason, code), Reported: res.Reason, Code: code, Err: err,
		}}
	})
	return p, nil
}

type inProcess struct {
	spec   spawner.Spec
	w      *worker.Worker
	cancel context.CancelFunc
}

func (p *inProcess) Spec() spawner.Spec { return p.spec }
func (p *inProcess) PID() int           { return 0 }

func (p *inProcess) Send(c spawner.Command) error {
	switch c.Type {
	case spawner.CommandPause:
		p.w.Pause()
	case spawner.CommandContinue:
		p.w.Continue()
	case spawner.CommandStop:
		p.w.Stop()
	case spawner.CommandPauseQueues:
		p.w.PauseQueues(c.Queues)
	default:
		return errors.New("unknown command " + string(c.Type))
	}
	return nil
}

// Kill stops the worker as a stop command would: a goroutine cannot be
// killed, and its running jobs are left to finish.
func (p *inProcess) Kill() error {
	p.cancel()
	return nil
}
