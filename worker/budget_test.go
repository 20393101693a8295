package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/worker"
)

// randomPayload is a JSON object holding n random hex digits, which the
// server stores uncompressed.
func randomPayload(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, `{"d":%q}`, hex.EncodeToString(b))
}

// gate is a handler that reports each job it starts and runs it until the
// test lets one job go.
type gate struct {
	started chan int64
	release chan struct{}
}

func newGate(b *bundle, name string) *gate {
	g := &gate{started: make(chan int64, 100), release: make(chan struct{})}
	b.jobs.Handle(name, func(ctx context.Context, j *queue.Job) error {
		g.started <- j.ID
		select {
		case <-g.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return g
}

// storedSize is the size a claim counts of job id's payload (see
// store.JobClaimParams.MaxBytes).
func (b *bundle) storedSize(t *testing.T, id int64) int64 {
	t.Helper()
	return int64(b.count(t, `SELECT CASE WHEN pg_column_compression(payload) IS NULL THEN pg_column_size(payload)
		ELSE octet_length(payload::text) END FROM queue_jobs WHERE id = $1`, id))
}

func (b *bundle) reserved(t *testing.T) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM queue_jobs WHERE reserved_by IS NOT NULL`)
}

// TestClaimRespectsTheByteBudget: with a budget of B bytes and payloads of
// S bytes, a worker with many more slots never holds more than B/S jobs,
// claimed or running: the handlers never run more at once (a job claimed
// would start at once in a free slot), and the database's reservations,
// read as each job starts and at polls while none finishes, never count
// more than that beside the finished jobs whose outcomes are not written
// yet; every job runs.
func TestClaimRespectsTheByteBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(b, "big")
	const n, fit = 12, 3
	specs := make([]*queue.JobSpec, n)
	for i := range specs {
		specs[i] = queue.NewJob("big", randomPayload(t, 20000))
	}
	ids := b.dispatch(t, specs...)
	s := b.storedSize(t, ids[0])
	budget := fit*s + s/2

	var written atomic.Int64
	w := b.worker(t, worker.Config{Concurrency: 16, PayloadBudget: budget, StopWhenEmpty: true,
		OnEvent: func(queue.Event) { written.Add(1) }})
	sig := worker.InitSignals(w)
	done := make(chan error, 1)
	go func() { _, err := w.Run(context.Background()); done <- err }()

	// held checks the reservations: those of finished jobs not written
	// yet aside (read before them, so that none is missed), at most fit.
	released := 0
	held := func(when string) {
		t.Helper()
		unwritten := released - int(written.Load())
		if r := b.reserved(t); r-unwritten > fit {
			t.Fatalf("%s: %d jobs reserved, %d of them finished and not written, budget %d bytes for payloads of %d: want at most %d held",
				when, r, unwritten, budget, s, fit)
		}
	}
	running, most := 0, 0
	for released < n {
		// Take the starts until as many run as may: the budget's or the
		// jobs left.
		for running < min(fit, n-released) {
			<-g.started
			running++
			held("a job started")
			most = max(most, running)
		}
		// Nothing more is claimed while the budget is full, poll after poll.
		sig.Polled.WaitFresh(t, 2)
		held("two polls later")
		select {
		case id := <-g.started:
			t.Fatalf("job %d started beside %d running, want at most %d", id, running, fit)
		default:
		}
		g.release <- struct{}{}
		running--
		released++
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if most != fit {
		t.Errorf("at most %d jobs ran at once, want the %d that fit the budget", most, fit)
	}
	if left := b.count(t, `SELECT count(*) FROM queue_jobs`); left != 0 {
		t.Errorf("%d jobs left, want every one run", left)
	}
}

// TestJobLargerThanTheBudgetRunsAlone: a job whose payload is larger than
// the budget is claimed once the worker holds nothing else, and runs
// alone; the jobs after it wait for it.
func TestJobLargerThanTheBudgetRunsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(b, "big")
	ids := b.dispatch(t, queue.NewJob("big", randomPayload(t, 60000)),
		queue.NewJob("big", randomPayload(t, 2000)), queue.NewJob("big", randomPayload(t, 2000)))
	budget := b.storedSize(t, ids[0]) / 2

	w := b.worker(t, worker.Config{Concurrency: 8, PayloadBudget: budget, StopWhenEmpty: true})
	sig := worker.InitSignals(w)
	done := make(chan error, 1)
	go func() { _, err := w.Run(context.Background()); done <- err }()

	if id := <-g.started; id != ids[0] {
		t.Fatalf("job %d started first, want the large job %d", id, ids[0])
	}
	sig.Polled.WaitFresh(t, 2)
	if r := b.reserved(t); r != 1 {
		t.Fatalf("%d jobs reserved beside the large job, want it alone", r)
	}
	g.release <- struct{}{}
	for range 2 {
		if id := <-g.started; id == ids[0] {
			t.Fatalf("the large job started twice")
		}
	}
	g.release <- struct{}{}
	g.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestByteBudgetKeepsTheQueuesOrder: when a queue's next job does not fit
// what the jobs held leave of the budget, the worker claims nothing from
// later queues until it does: the job is not passed over for the smaller
// jobs of a later queue, which would keep the worker from ever holding
// little enough.
func TestByteBudgetKeepsTheQueuesOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(b, "job")
	first := b.dispatch(t, queue.NewJob("job", randomPayload(t, 30000)).OnQueue("a"),
		queue.NewJob("job", randomPayload(t, 80000)).OnQueue("a"))
	specs := make([]*queue.JobSpec, 10)
	for i := range specs {
		specs[i] = queue.NewJob("job", randomPayload(t, 5000)).OnQueue("b")
	}
	later := b.dispatch(t, specs...)
	// Room for the large job alone, or for the small one of queue a and
	// many of queue b, but not for both jobs of queue a.
	budget := b.storedSize(t, first[1]) + b.storedSize(t, first[0])/2

	w := b.worker(t, worker.Config{Queues: []string{"a", "b"}, Concurrency: 16, PayloadBudget: budget, StopWhenEmpty: true})
	sig := worker.InitSignals(w)
	done := make(chan error, 1)
	go func() { _, err := w.Run(context.Background()); done <- err }()

	if id := <-g.started; id != first[0] {
		t.Fatalf("job %d started first, want %d", id, first[0])
	}
	sig.Polled.WaitFresh(t, 2)
	if r := b.reserved(t); r != 1 {
		t.Fatalf("%d jobs reserved beside the first job of queue a, want none of queue b while a's large job waits", r)
	}
	// The claimer's own start order (handlers report theirs in any order).
	sig.Started.Drain()
	g.release <- struct{}{}
	if id := sig.Started.Wait(t); id != first[1] {
		t.Fatalf("job %d started after the first, want the large job %d", id, first[1])
	}
	<-g.started // the large job's
	for range later {
		g.release <- struct{}{}
		<-g.started
	}
	g.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if left := b.count(t, `SELECT count(*) FROM queue_jobs`); left != 0 {
		t.Errorf("%d jobs left, want every one run", left)
	}
}

// TestPayloadNotKeptAfterTheHandler: once a job's handler has returned,
// nothing of the worker's keeps its payload, though the worker runs on and
// holds jobs claimed with it: the payloads of the jobs that ran are freed
// by the collector while a later job of the same claim still waits for
// its slot.
func TestPayloadNotKeptAfterTheHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 11
	specs := make([]*queue.JobSpec, n)
	for i := range specs {
		specs[i] = queue.NewJob("p", randomPayload(t, 4000))
	}
	ids := b.dispatch(t, specs...)
	block, release := ids[n-2], make(chan struct{})
	freed := make(chan int64, n)
	started := make(chan int64, n)
	b.jobs.Handle("p", func(ctx context.Context, j *queue.Job) error {
		runtime.AddCleanup(&j.Payload[0], func(id int64) { freed <- id }, j.ID)
		started <- j.ID
		if j.ID == block {
			<-release
		}
		return nil
	})
	// One slot: the first claim takes one job (no prefetch before a job
	// has finished), the second the other ten, which wait in turn. The
	// prefetch hold is long enough that a slow machine does not give the
	// waiting jobs back while the blocked one runs.
	w := b.worker(t, worker.Config{Concurrency: 1, StopWhenEmpty: true, PrefetchHold: time.Hour})
	done := make(chan error, 1)
	go func() { _, err := w.Run(context.Background()); done <- err }()
	for id := range started {
		if id == block {
			break
		}
	}
	if b.count(t, `SELECT count(*) FROM queue_jobs WHERE id = $1 AND reserved_by IS NOT NULL`, ids[n-1]) != 1 {
		t.Fatalf("the last job is not reserved while the blocking job runs: want it claimed, waiting for the slot")
	}
	got := map[int64]bool{}
	waitFor(t, "the payloads of the jobs that ran freed", func() bool {
		runtime.GC()
		for {
			select {
			case id := <-freed:
				got[id] = true
			default:
				return len(got) >= n-2
			}
		}
	})
	for _, id := range ids[:n-2] {
		if !got[id] {
			t.Errorf("the payload of job %d, which ran, was not freed", id)
		}
	}
	for _, id := range ids[n-2:] {
		if got[id] {
			t.Errorf("the payload of job %d was freed while the worker holds it", id)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
