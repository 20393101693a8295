package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/worker"
)

// A claim the server cancels for its statement timeout shrinks by half
// and is tried again at once, and the claim size grows back over claims
// that pass: with every claim of more than 6 jobs timing out, a worker of
// 16 slots claims 16, then 8, then 4 at a time, never more than 6, runs
// every job once, and logs the first timeout once.
func TestWorkerShrinksAClaimThatTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, sql := range []string{
		`CREATE FUNCTION slow_claim() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		     IF (SELECT count(*) FROM claimed) > 6 THEN
		         RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = '57014';
		     END IF;
		     RETURN NULL;
		 END $$`,
		`CREATE TRIGGER slow_claim AFTER UPDATE ON queue_jobs REFERENCING NEW TABLE AS claimed
		 FOR EACH STATEMENT EXECUTE FUNCTION slow_claim()`,
	} {
		if _, err := b.pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	b.jobs.Handle("noop", func(context.Context, *queue.Job) error { return nil })
	const n = 100
	jobs := make([]*queue.JobSpec, n)
	for i := range jobs {
		jobs[i] = queue.NewJob("noop", nil)
	}
	b.dispatch(t, jobs...)
	var logs syncbuf.Buffer
	w := b.worker(t, worker.Config{Concurrency: 16, Prefetch: -1, StopWhenEmpty: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	sig := worker.InitSignals(w)
	var splits, claims []int
	sig.ClaimSplit.At(func(k int) { splits = append(splits, k) })
	sig.Claimed.At(func(k int) { claims = append(claims, k) })
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang) // only catches a hang
	defer cancel()
	res, err := w.Run(ctx)
	if err != nil || res.Reason != spawner.ExitEmpty || res.Jobs != n {
		t.Fatalf("run: %+v, %v; want empty after %d jobs", res, err, n)
	}
	if len(splits) < 2 || splits[0] != 16 || splits[1] != 8 {
		t.Errorf("timed-out claims of %v jobs, want 16 then 8 first", splits)
	}
	sum := 0
	for _, k := range claims {
		sum += k
		if k > 6 {
			t.Errorf("a claim of %d jobs passed the injected timeout", k)
		}
	}
	if sum != n {
		t.Errorf("claims %v took %d jobs, want %d", claims, sum, n)
	}
	if k := b.count(t, `SELECT count(*) FROM fleet_jobs WHERE status = 'completed' AND attempt = 1`); k != n {
		t.Errorf("%d jobs completed at their first attempt, want %d", k, n)
	}
	if k := b.count(t, `SELECT count(*) FROM fleet_jobs`); k != n {
		t.Errorf("%d history rows, want %d", k, n)
	}
	out := logs.String()
	if c := strings.Count(out, "statement timeout on a claim"); c != 1 || !strings.Contains(out, "statement timeout on a claim of 16 jobs; claiming at most 8 at a time") {
		t.Errorf("%d claim timeout lines, want one about 16 jobs:\n%s", c, out)
	}
	if strings.Contains(out, "claim failed") {
		t.Errorf("a timed-out claim logged as a failure:\n%s", out)
	}
}
