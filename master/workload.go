package master

import (
	"context"
	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"log/slog"
	"time"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/internal/ratelog"
	"github.com/fleet-go/fleet/store"
)

// workload is the service that reads what the balancer weighs, every
// balance cooldown: the counts of queue_counts and the mean runtimes of
// the last 5 complete minutes from the metrics snapshots (1 s per job for
// a queue that has none). Neither reads the job history, so a read costs
// the same however much history there is. Each read goes to supervision
// as the latest workload; its Start reads once, so that the first
// allocation is weighed.
type workload struct {
	st    *store.Store
	log   *slog.Logger
	logs  ratelog.Log
	every time.Duration

	out *latest[map[string]balancer.QueueWorkload] // to supervision

	lc  svclife.Lifecycle
	sig struct {
		read svclife.Signal[map[string]balancer.QueueWorkload] // a workload handed to supervision
	}
}

func newWorkload(st *store.Store, every time.Duration, log *slog.Logger, out *latest[map[string]balancer.QueueWorkload]) *workload {
	return &workload{st: st, log: log, every: every, out: out}
}

func (w *workload) Name() string { return "workload" }

// Start reads the workload once, then every cooldown until Stop.
func (w *workload) Start(ctx context.Context) error {
	sctx, end, err := w.lc.Begin(ctx, w.Name())
	if err != nil {
		return err
	}
	w.read(sctx)
	go func() {
		defer end()
		svclife.TickEvery(sctx, w.every, w.read, nil)
	}()
	return nil
}

// Stop cancels a read in flight and waits.
func (w *workload) Stop() { w.lc.Halt() }

// read reads the counts and runtimes and hands them to supervision; when
// the counts cannot be read, supervision keeps the allocation it has.
func (w *workload) read(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	counts, err := w.st.QueueCounts(rctx)
	if err != nil {
		w.logs.Fail(w.log, "workload", "read workload failed; keeping the current allocation", "err", err)
		return
	}
	w.logs.OK(w.log, "workload", "reading the workload works again")
	runtimes := map[string]float64{}
	if stats, err := w.st.QueueRuntimes(rctx); err != nil {
		w.logs.Fail(w.log, "runtimes", "read average runtimes failed; assuming 1 s per job", "err", err)
	} else {
		for _, s := range stats {
			runtimes[s.Queue] = s.AvgRuntimeMs
		}
	}
	out := map[string]balancer.QueueWorkload{}
	for _, c := range counts {
		out[c.Queue] = balancer.NewQueueWorkload(c.Queue, int(c.Pending), int(c.Reserved), 0, runtimes[c.Queue])
	}
	w.out.put(out)
	w.sig.read.Send(out)
}
