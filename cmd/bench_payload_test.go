package cmd_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

// TestBenchPayload: the payload scenario dispatches, for each size, the
// jobs that make --payload-mb MiB (at least 10) with app dispatch --count
// in a process of its own, and drains them with one fleet:work, whose
// handler decodes each payload; it reports both rates and both peak RSS
// figures, and leaves nothing behind. No figure is compared with a
// threshold: the scenario's numbers are for the docs.
func TestBenchPayload(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)

	r := runProcess(t, env, "bench", "--scenario", "payload", "--payload-sizes", "64,256", "--payload-mb", "1",
		"--payload-concurrency", "8", "--json")
	if r.code != 0 {
		t.Fatalf("bench payload: %+v", r)
	}
	var doc struct {
		Scenarios []string `json:"scenarios"`
		Payload   *struct {
			Concurrency int `json:"concurrency"`
			Budget      int `json:"payload_budget_bytes"`
			Sizes       []struct {
				KiB             int     `json:"payload_kib"`
				Jobs            int     `json:"jobs"`
				DispatchSecs    float64 `json:"dispatch_secs"`
				DispatchMBps    float64 `json:"dispatch_mb_per_sec"`
				DispatcherRSS   float64 `json:"dispatcher_peak_rss_mb"`
				DrainSecs       float64 `json:"drain_secs"`
				DrainMBps       float64 `json:"drain_mb_per_sec"`
				DrainJobsPerSec float64 `json:"drain_jobs_per_sec"`
				WorkerRSS       float64 `json:"worker_peak_rss_mb"`
			} `json:"sizes"`
		} `json:"payload"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("bench payload: stdout is not one JSON document: %v\n%s", err, r.stdout)
	}
	p := doc.Payload
	if strings.Join(doc.Scenarios, ",") != "payload" || p == nil || p.Concurrency != 8 || p.Budget != 32<<20 || len(p.Sizes) != 2 {
		t.Fatalf("payload: %s", r.stdout)
	}
	for i, want := range []struct{ kib, jobs int }{{64, 16}, {256, 10}} {
		s := p.Sizes[i]
		if s.KiB != want.kib || s.Jobs != want.jobs {
			t.Errorf("size %d: %d jobs of %d KiB, want %d of %d", i, s.Jobs, s.KiB, want.jobs, want.kib)
		}
		if s.DispatchSecs <= 0 || s.DispatchMBps <= 0 || s.DispatcherRSS <= 0 || s.DrainSecs <= 0 || s.DrainMBps <= 0 ||
			s.DrainJobsPerSec <= 0 || s.WorkerRSS <= 0 {
			t.Errorf("size %d KiB: a figure is missing: %+v", s.KiB, s)
		}
	}
	for _, table := range []string{"queue_jobs", "queue_failed_jobs", "fleet_jobs"} {
		if n := countJobs(t, url, table); n != 0 {
			t.Errorf("%d rows left in %s after the payload scenario", n, table)
		}
	}
}
