package cmd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/apptest"
	"github.com/fleet-go/fleet/pgtest"
)

// peersDoc is the peers scenario's part of the bench's JSON document.
type peersDoc struct {
	Scenarios []string `json:"scenarios"`
	Peers     *struct {
		Rounds int `json:"rounds"`
		Paths  []struct {
			Name              string    `json:"name"`
			Version           string    `json:"version"`
			Missing           string    `json:"missing"`
			JobsPerSec        []float64 `json:"jobs_per_sec"`
			FromStart         []float64 `json:"jobs_per_sec_from_start"`
			MasterVs          float64   `json:"master_vs"`
			MasterVsFromStart float64   `json:"master_vs_from_start"`
		} `json:"paths"`
	} `json:"peers"`
}

// runPeersBench runs "bench --scenario peers" of 500 jobs, one round, as a
// process of its own, with the peers looked for in dir.
func runPeersBench(t *testing.T, url, dir string) (peersDoc, result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, os.Args[0], "bench", "--scenario", "peers", "--jobs", "500", "--rounds", "1",
		"--peers-dir", dir, "--json")
	c.Dir = t.TempDir()
	c.Env = append(os.Environ(), apptest.EnvAppMode+"=1", "APP_DATABASE__URL="+url)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	r := result{stdout: out.String()}
	if err := c.Run(); err != nil {
		r.code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		}
	}
	r.stdout, r.stderr = out.String(), errb.String()
	if r.code != 0 {
		t.Fatalf("bench --scenario peers: %+v", r)
	}
	var doc peersDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("bench peers: stdout is not one JSON document: %v\n%s", err, r.stdout)
	}
	p := doc.Peers
	if strings.Join(doc.Scenarios, ",") != "peers" || p == nil || p.Rounds != 1 || len(p.Paths) != 4 ||
		p.Paths[0].Name != "fleet master" || p.Paths[1].Name != "fleet:work" || p.Paths[2].Name != "river" || p.Paths[3].Name != "graphile-worker" {
		t.Fatalf("peers figures: %s", r.stdout)
	}
	// fleet's own paths run whatever is installed; each drain's rate from
	// its start, start-up included, is below its rate from its first job.
	for _, f := range p.Paths[:2] {
		if f.Missing != "" || len(f.JobsPerSec) != 1 || len(f.FromStart) != 1 || f.FromStart[0] <= 0 || f.FromStart[0] > f.JobsPerSec[0] {
			t.Fatalf("fleet's path %s: %s", f.Name, r.stdout)
		}
	}
	for _, table := range []string{"queue_jobs", "queue_failed_jobs", "fleet_jobs"} {
		if n := countJobs(t, url, table); n != 0 {
			t.Errorf("%d rows left in %s after the peers", n, table)
		}
	}
	if n := countJobs(t, url, "information_schema.schemata WHERE schema_name LIKE 'fleet_bench_%'"); n != 0 {
		t.Errorf("%d peer schemas left after the peers", n)
	}
	return doc, r
}

// TestBenchPeersNotInstalled: without the peers, the peers scenario runs
// fleet's two paths and says, for each peer, that it did not run and how
// to install it.
func TestBenchPeersNotInstalled(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: runs the application as a process of its own; runs without -short")
	}
	t.Parallel()
	url := pgtest.URL(t)
	doc, r := runPeersBench(t, url, filepath.Join(t.TempDir(), "none"))
	for _, p := range doc.Peers.Paths[2:] {
		if !strings.Contains(p.Missing, "bench/peers/install.sh") || len(p.JobsPerSec) != 0 {
			t.Errorf("peer %s not installed: missing %q, rounds %v", p.Name, p.Missing, p.JobsPerSec)
		}
	}
	if !strings.Contains(r.stderr, "bench/peers/install.sh") {
		t.Errorf("no word on how to install the peers on stderr:\n%s", r.stderr)
	}
}

// TestBenchPeers runs the peers scenario with River and graphile-worker
// as bench/peers/install.sh installs them (into .cache/peers of the
// checkout, or FLEET_BENCH_PEERS): each drains the same 500 jobs in a
// schema of its own, which is dropped after.
func TestBenchPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: runs the application and the peers as processes; runs without -short")
	}
	dir := os.Getenv("FLEET_BENCH_PEERS")
	if dir == "" {
		root, err := filepath.Abs("..")
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".cache", "peers")
	}
	for _, f := range []string{"river/river-bench", "graphile/run.mjs", "graphile/node_modules/graphile-worker/package.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			if os.Getenv(pgtest.EnvRequire) == "all" {
				t.Fatalf("the peers are not installed in %s (%v): run bash bench/peers/install.sh", dir, err)
			}
			t.Skipf("the peers are not installed in %s: run bash bench/peers/install.sh", dir)
		}
	}
	t.Parallel()
	url := pgtest.URL(t)
	doc, r := runPeersBench(t, url, dir)
	for _, p := range doc.Peers.Paths[1:] {
		if p.Missing != "" || len(p.JobsPerSec) != 1 || len(p.FromStart) != 1 || p.FromStart[0] <= 0 ||
			p.FromStart[0] > p.JobsPerSec[0] || p.MasterVs <= 0 || p.MasterVsFromStart <= 0 {
			t.Errorf("path %s %s: missing %q, rounds %v from the first job, %v from the start, master / it %v, %v\n%s",
				p.Name, p.Version, p.Missing, p.JobsPerSec, p.FromStart, p.MasterVs, p.MasterVsFromStart, r.stderr)
		}
	}
}

// TestBenchLatency: the latency scenario times each job's handler start
// on the handler's own clock (the stamp its handler notes) as well as by
// fleet_jobs.started_at, and a durable commit between the samples; every
// job starts before its outcome is seen written.
func TestBenchLatency(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	r := runProcess(t, dbEnv(url), "bench", "--scenario", "latency", "--samples", "5", "--json")
	if r.code != 0 {
		t.Fatalf("bench latency: %+v", r)
	}
	type stats struct{ P50, P95, Max float64 }
	var doc struct {
		Latency *struct {
			Samples     int   `json:"samples"`
			Start       stats `json:"dispatch_to_start_ms"`
			StartedAt   stats `json:"dispatch_to_started_at_ms"`
			Outcome     stats `json:"dispatch_to_outcome_ms"`
			Commit      stats `json:"durable_commit_ms"`
			Concurrency int   `json:"concurrency"`
		} `json:"latency"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("bench latency: stdout is not one JSON document: %v\n%s", err, r.stdout)
	}
	l := doc.Latency
	if l == nil || l.Samples != 5 || l.Start.P50 <= 0 || l.StartedAt.P50 <= 0 || l.Commit.P50 <= 0 {
		t.Fatalf("latency figures: %s", r.stdout)
	}
	if l.Start.P50 > l.Outcome.P50 || l.Start.Max > l.Outcome.Max {
		t.Errorf("a handler started after its outcome was seen written: %s", r.stdout)
	}
	if n := countJobs(t, url, "queue_jobs"); n != 0 {
		t.Errorf("%d rows left in queue_jobs after the latency scenario", n)
	}
}
