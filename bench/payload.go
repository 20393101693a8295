package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fleet-go/fleet/queue"
)

// The payload scenario: jobs with large payloads, dispatched by the app's
// own `dispatch --count` (which streams them) and drained by one
// fleet:work, each a process of its own whose peak resident memory the
// kernel reports when it exits.
const (
	// PayloadJobName is the payload scenario's handler (see Register): it
	// decodes its job's payload, as a handler does, and checks it.
	PayloadJobName = "fleet.bench.payload"
	// DefaultPayloadSizes are the payload sizes, in KiB, the scenario
	// measures unless --payload-sizes says otherwise.
	DefaultPayloadSizes = "512,4096"
	// DefaultPayloadMB is how many MiB of payloads the scenario dispatches
	// and drains for each size: 5,000 jobs of 512 KiB.
	DefaultPayloadMB = 2500
	// DefaultPayloadConc is the draining worker's concurrency.
	DefaultPayloadConc = 64
	// payloadQueue is the scenario's queue.
	payloadQueue = Prefix + "payload"
	// payloadMinJobs is the fewest jobs of a size.
	payloadMinJobs = 10
)

// benchPayload is what PayloadJobName's handler decodes.
type benchPayload struct {
	Data string `json:"data"`
}

// handlePayload is PayloadJobName's handler.
func handlePayload(_ context.Context, job *queue.Job) error {
	var p benchPayload
	if err := job.Decode(&p); err != nil {
		return err
	}
	if p.Data == "" {
		return errors.New("bench payload: no data")
	}
	return nil
}

// payloadResult is the payload scenario's part of the JSON document. MB
// are MiB throughout.
type payloadResult struct {
	Concurrency int `json:"concurrency"`
	// BudgetBytes is the workers' queue.payload_budget_bytes (0: no bound).
	BudgetBytes int           `json:"payload_budget_bytes"`
	MBPerSize   int           `json:"mb_per_size"`
	Sizes       []payloadSize `json:"sizes"`
}

// payloadSize is one payload size's dispatch and drain.
type payloadSize struct {
	PayloadKiB int `json:"payload_kib"`
	Jobs       int `json:"jobs"`
	// Dispatch: app dispatch --count Jobs, from its start to its exit.
	DispatchSecs        float64 `json:"dispatch_secs"`
	DispatchMBPerSec    float64 `json:"dispatch_mb_per_sec"`
	DispatcherPeakRSSMB float64 `json:"dispatcher_peak_rss_mb"`
	// Drain: one fleet:work, from its first claim to the queue empty.
	DrainSecs       float64 `json:"drain_secs"`
	DrainMBPerSec   float64 `json:"drain_mb_per_sec"`
	DrainJobsPerSec float64 `json:"drain_jobs_per_sec"`
	WorkerPeakRSSMB float64 `json:"worker_peak_rss_mb"`
}

// payloadSizes parses --payload-sizes (empty: DefaultPayloadSizes), in KiB.
func payloadSizes(s string) ([]int, error) {
	if s == "" {
		s = DefaultPayloadSizes
	}
	return parseInts("--payload-sizes", s)
}

// payloadJobs is how many jobs of kib KiB make mb MiB (at least
// payloadMinJobs).
func payloadJobs(mb, kib int) int { return max(payloadMinJobs, mb*1024/kib) }

func (b *bench) payload(ctx context.Context) error {
	sizes, err := payloadSizes(b.f.PayloadSizes)
	if err != nil {
		return err
	}
	res := &payloadResult{Concurrency: b.f.PayloadConc, BudgetBytes: b.cfg.Queue.PayloadBudgetBytes, MBPerSize: b.f.PayloadMB}
	dir, err := os.MkdirTemp("", "fleet-bench-payload-")
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	defer os.RemoveAll(dir)
	for _, kib := range sizes {
		n := payloadJobs(b.f.PayloadMB, kib)
		b.progressf("payload: %d jobs of %d KiB, dispatched by app dispatch --count, drained by one fleet:work × %d", n, kib, res.Concurrency)
		ps, err := b.payloadSize(ctx, dir, kib, n, res.Concurrency)
		if err != nil {
			return fmt.Errorf("%d KiB: %w", kib, err)
		}
		res.Sizes = append(res.Sizes, ps)
		budget := "no byte budget"
		if res.BudgetBytes > 0 {
			budget = fmt.Sprintf("byte budget %d MiB", res.BudgetBytes>>20)
		}
		b.addRow("payload", fmt.Sprintf("dispatch --count %d of %d KiB", n, kib),
			fmt.Sprintf("%.1f MB/s", ps.DispatchMBPerSec), fmt.Sprintf("dispatcher peak RSS %.0f MB", ps.DispatcherPeakRSSMB))
		b.addRow("payload", fmt.Sprintf("drain of %d KiB at concurrency %d", kib, res.Concurrency),
			fmt.Sprintf("%.1f MB/s (%.0f jobs/s)", ps.DrainMBPerSec, ps.DrainJobsPerSec),
			fmt.Sprintf("worker peak RSS %.0f MB, %s", ps.WorkerPeakRSSMB, budget))
		if err := b.cleanup(ctx, "after a payload drain"); err != nil {
			return err
		}
	}
	b.rep.Payload = res
	return nil
}

// payloadSize dispatches n jobs of a payload of kib KiB with app dispatch
// --count and drains them with one fleet:work of concurrency c.
func (b *bench) payloadSize(ctx context.Context, dir string, kib, n, c int) (payloadSize, error) {
	ps := payloadSize{PayloadKiB: kib, Jobs: n}
	size := kib << 10
	file := filepath.Join(dir, fmt.Sprintf("payload-%d.json", kib))
	if err := writePayload(file, size); err != nil {
		return ps, err
	}
	mb := float64(n) * float64(size) / (1 << 20)

	// The dispatch: its own process, so that its peak RSS is its own.
	env, err := b.childEnv("APP_QUEUE__MAX_PAYLOAD_BYTES=" + strconv.Itoa(max(size, 1<<20)))
	if err != nil {
		return ps, err
	}
	t0 := time.Now()
	p, err := b.startProc([]string{"dispatch", "--name", PayloadJobName, "--queue", payloadQueue, "--count", strconv.Itoa(n),
		"--tries", "1", "--payload", "@" + file}, env)
	if err != nil {
		return ps, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		_ = p.stop()
		return ps, ctx.Err()
	}
	took := time.Since(t0)
	if p.err != nil {
		return ps, fmt.Errorf("app dispatch: %w", p.err)
	}
	ps.DispatchSecs = round(took.Seconds(), 3)
	ps.DispatchMBPerSec = round(mb/took.Seconds(), 1)
	ps.DispatcherPeakRSSMB = round(peakRSSMB(p.cmd.ProcessState), 1)
	if got, err := b.db.queueSize(ctx, payloadQueue); err != nil || got != int64(n) {
		return ps, fmt.Errorf("app dispatch left %d jobs, want %d (%v)", got, n, err)
	}

	// The drain.
	env, err = b.childEnv()
	if err != nil {
		return ps, err
	}
	since := time.Now()
	w, err := b.startProc([]string{"fleet:work", "--queue", payloadQueue, "--concurrency", strconv.Itoa(c), "--reports"}, env)
	if err != nil {
		return ps, err
	}
	defer func() { _ = w.stop() }()
	stop := b.progress(ctx, fmt.Sprintf("drain of %d KiB × %d", kib, c), int64(n), b.doneOf(payloadQueue, int64(n)))
	emptyAt, err := b.waitEmpty(ctx, w.exited, payloadQueue, 20*time.Millisecond)
	stop()
	if err != nil {
		return ps, err
	}
	if err := w.stop(); err != nil {
		return ps, err
	}
	r, failed, err := b.drained(ctx, payloadQueue, n, since, emptyAt)
	if err == nil {
		err = drainFailed(failed)
	}
	if err != nil {
		return ps, err
	}
	ps.DrainSecs, ps.DrainJobsPerSec = r.Secs, r.JobsPerSec
	if r.Secs > 0 {
		ps.DrainMBPerSec = round(mb/r.Secs, 1)
	}
	ps.WorkerPeakRSSMB = round(peakRSSMB(w.cmd.ProcessState), 1)
	return ps, nil
}

// writePayload writes a JSON object of exactly size bytes to file: random
// data, base64-encoded, which the server stores uncompressed.
func writePayload(file string, size int) error {
	const frame = len(`{"data":""}`)
	raw := make([]byte, base64.StdEncoding.DecodedLen(size))
	if _, err := rand.Read(raw); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	data := base64.StdEncoding.EncodeToString(raw)[:max(size-frame, 1)]
	doc, err := json.Marshal(benchPayload{Data: data})
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	return nil
}
