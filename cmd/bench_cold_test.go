package cmd_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/pgtest"
)

type coldRoundDoc struct {
	StartupSecs float64 `json:"startup_secs"`
	Secs        float64 `json:"secs"`
	JobsPerSec  float64 `json:"jobs_per_sec"`
	FleetCPU    float64 `json:"fleet_cpu_ms_per_1000_jobs"`
}

type coldPathDoc struct {
	Processes   int            `json:"processes"`
	Concurrency int            `json:"concurrency"`
	Rounds      []coldRoundDoc `json:"rounds"`
	Median      float64        `json:"median_jobs_per_sec"`
}

// TestBenchColdAndMasters: one round of the cold scenario drains its
// backlog once through a master process of 2 × 500 and once through one
// fleet:work × 1000, each timed from its start; the masters scenario
// drains it through one master and through two, one process each, sharing
// the 1000 slots. Every job runs once (no failed job: the bench checks),
// and nothing is left behind.
func TestBenchColdAndMasters(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)

	r := runProcess(t, env, "bench", "--scenario", "cold", "--jobs", "1000", "--rounds", "1", "--json")
	if r.code != 0 {
		t.Fatalf("bench cold: %+v", r)
	}
	var doc struct {
		Scenarios []string `json:"scenarios"`
		Cold      *struct {
			Jobs        int         `json:"jobs"`
			Master      coldPathDoc `json:"master"`
			One         coldPathDoc `json:"one_process"`
			MasterVsOne float64     `json:"master_vs_one_process"`
		} `json:"cold"`
		Masters *struct {
			Concurrency int `json:"total_concurrency"`
			Cases       []struct {
				Masters     int            `json:"masters"`
				Concurrency int            `json:"concurrency"`
				Rounds      []coldRoundDoc `json:"rounds"`
				VsOne       float64        `json:"vs_one_master"`
			} `json:"cases"`
		} `json:"masters"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("bench cold: stdout is not one JSON document: %v\n%s", err, r.stdout)
	}
	c := doc.Cold
	if strings.Join(doc.Scenarios, ",") != "cold" || c == nil || c.Jobs != 1000 {
		t.Fatalf("cold: %s", r.stdout)
	}
	for _, p := range []struct {
		name string
		p    coldPathDoc
		want [2]int // processes, concurrency
	}{{"master", c.Master, [2]int{2, 500}}, {"one", c.One, [2]int{1, 1000}}} {
		if p.p.Processes != p.want[0] || p.p.Concurrency != p.want[1] || len(p.p.Rounds) != 1 || p.p.Median <= 0 {
			t.Errorf("cold %s: %+v", p.name, p.p)
			continue
		}
		// The first claim comes after the start, the queue empty after it.
		if rd := p.p.Rounds[0]; rd.StartupSecs <= 0 || rd.Secs <= rd.StartupSecs || rd.FleetCPU <= 0 {
			t.Errorf("cold %s round: %+v", p.name, rd)
		}
	}
	if c.MasterVsOne <= 0 {
		t.Errorf("cold ratio: %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "fleet master stopped: 2 workers started, 0 recycled, 0 crashed, 1000 jobs run") {
		t.Errorf("the master's summary is missing or says otherwise:\n%s", r.stderr)
	}
	for _, table := range []string{"queue_jobs", "queue_failed_jobs", "fleet_jobs", "fleet_masters"} {
		if n := countJobs(t, url, table); n != 0 {
			t.Errorf("%d rows left in %s after the cold scenario", n, table)
		}
	}

	r = runProcess(t, env, "bench", "--scenario", "masters", "--masters", "1,2", "--jobs", "1000", "--rounds", "1", "--json")
	if r.code != 0 {
		t.Fatalf("bench masters: %+v", r)
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("bench masters: stdout is not one JSON document: %v\n%s", err, r.stdout)
	}
	m := doc.Masters
	if m == nil || m.Concurrency != 1000 || len(m.Cases) != 2 {
		t.Fatalf("masters: %s", r.stdout)
	}
	for i, want := range [][2]int{{1, 1000}, {2, 500}} {
		cs := m.Cases[i]
		if cs.Masters != want[0] || cs.Concurrency != want[1] || len(cs.Rounds) != 1 || cs.Rounds[0].JobsPerSec <= 0 || cs.VsOne <= 0 {
			t.Errorf("masters case %d: %+v", i, cs)
		}
	}
	if m.Cases[0].VsOne != 1 {
		t.Errorf("the first case is the reference: %+v", m.Cases[0])
	}
	// Three masters ran, each with one worker; each drain ran every job once.
	if n := strings.Count(r.stderr, "fleet master stopped: 1 workers started, 0 recycled, 0 crashed"); n != 3 {
		t.Errorf("%d masters stopped with one worker and no crash, want 3:\n%s", n, r.stderr)
	}
	for _, table := range []string{"queue_jobs", "queue_failed_jobs", "fleet_jobs", "fleet_masters"} {
		if n := countJobs(t, url, table); n != 0 {
			t.Errorf("%d rows left in %s after the masters scenario", n, table)
		}
	}
}
