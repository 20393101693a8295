package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleet-go/fleet/pgtest"
)

// grafanaPanel is the part of a Grafana panel the test reads; rows hold
// panels of their own.
type grafanaPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

var fleetName = regexp.MustCompile(`\bfleet_[A-Za-z0-9_]+`)

// TestGrafanaDashboard checks the shipped dashboard: every panel has a
// title and queries, and every fleet_ series a query names is a family a
// collector over a seeded database emits.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title         string         `json:"title"`
		SchemaVersion int            `json:"schemaVersion"`
		Panels        []grafanaPanel `json:"panels"`
		Inputs        []struct {
			Name string `json:"name"`
		} `json:"__inputs"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if d.Title == "" || d.SchemaVersion < 36 || len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" {
		t.Errorf("title %q, schemaVersion %d, inputs %+v; want a title, a recent schema and the DS_PROMETHEUS input", d.Title, d.SchemaVersion, d.Inputs)
	}

	pool := pgtest.Pool(t)
	seed(t, pool)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(pool, Options{Beat: fakeBeat{}, Version: "v1", LongWait: map[string]int{"mail": 30}}))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	emitted := map[string]bool{}
	for _, f := range families {
		emitted[f.GetName()] = true
	}

	used := map[string]bool{}
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if strings.TrimSpace(p.Title) == "" {
				t.Errorf("a %s panel has no title", p.Type)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no targets", p.Title)
			}
			for _, tg := range p.Targets {
				names := fleetName.FindAllString(tg.Expr, -1)
				if len(names) == 0 {
					t.Errorf("panel %q: expression %q names no fleet_ series", p.Title, tg.Expr)
				}
				for _, n := range names {
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						n = strings.TrimSuffix(n, suffix)
					}
					used[n] = true
					if !emitted[n] {
						t.Errorf("panel %q: %s is not a family the collector emits", p.Title, n)
					}
				}
			}
		}
	}
	walk(d.Panels)
	if len(d.Panels) == 0 || len(used) == 0 {
		t.Fatalf("the dashboard has %d panels using %d families", len(d.Panels), len(used))
	}
}
