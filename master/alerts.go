package master

import (
	"context"
	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"log/slog"

	"github.com/fleet-go/fleet/model"
)

// alertQueue is how many long-wait alerts may wait for a slow listener;
// past it the duties service drops them, saying so.
const alertQueue = 64

// alerts is the service that hands long-wait alerts to the app's
// listener (Settings.OnLongWait), one at a time, from its own goroutine,
// so that a slow listener delays neither the duties that raise them nor
// anything else. It starts before duties and stops after them; on Stop it
// delivers what is still queued, and a listener's context ends with the
// stop budget. Without a listener it runs nothing.
type alerts struct {
	listener func(context.Context, model.LongWaitDetected)
	log      *slog.Logger
	budget   *stopBudget
	in       chan model.LongWaitDetected

	lc  svclife.Lifecycle
	sig struct {
		delivered svclife.Signal[model.LongWaitDetected] // the listener returned
	}
}

func newAlerts(listener func(context.Context, model.LongWaitDetected), log *slog.Logger, budget *stopBudget) *alerts {
	return &alerts{listener: listener, log: log, budget: budget, in: make(chan model.LongWaitDetected, alertQueue)}
}

func (a *alerts) Name() string { return "alerts" }

// offer queues e for the listener without waiting, and reports false when
// the queue is full (or there is no listener): the alert is dropped.
func (a *alerts) offer(e model.LongWaitDetected) bool {
	if a.listener == nil {
		return false
	}
	select {
	case a.in <- e:
		return true
	default:
		return false
	}
}

// Start delivers alerts until Stop.
func (a *alerts) Start(ctx context.Context) error {
	sctx, end, err := a.lc.Begin(ctx, a.Name())
	if err != nil {
		return err
	}
	if a.listener == nil {
		end()
		return nil
	}
	// The listener's context: the service's values, ended by the stop
	// budget rather than by Stop, so an alert raised before the stop is
	// still delivered.
	lctx, cancel := context.WithCancel(context.WithoutCancel(sctx))
	unhook := context.AfterFunc(a.budget.context(), cancel)
	go func() {
		defer end()
		defer cancel()
		defer unhook()
		for {
			select {
			case e := <-a.in:
				a.deliver(lctx, e)
			case <-sctx.Done():
				for {
					select {
					case e := <-a.in:
						a.deliver(lctx, e)
					default:
						return
					}
				}
			}
		}
	}()
	return nil
}

func (a *alerts) deliver(ctx context.Context, e model.LongWaitDetected) {
	if ctx.Err() != nil {
		a.log.Warn("long-wait alert not delivered: the master stopped", "queue", e.Queue)
		return
	}
	a.listener(ctx, e)
	a.sig.delivered.Send(e)
}

// Stop delivers the queued alerts within the stop budget and waits.
func (a *alerts) Stop() {
	a.budget.start()
	a.lc.Halt()
}
