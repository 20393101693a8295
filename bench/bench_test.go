package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// defaultFlags are the flags of "app bench" left at their defaults.
func defaultFlags() Flags {
	return Flags{Scenario: "all", Jobs: 200000, Backlog: 1000000, IdleSecs: 60, CellSecs: 15, Samples: 200, Rounds: 3,
		ScaleBacklogs: "10000,100000,1000000", ScaleConcurrency: "1,16,64,256,1000", Masters: DefaultMasters,
		PayloadSizes: DefaultPayloadSizes, PayloadMB: DefaultPayloadMB, PayloadConc: DefaultPayloadConc}
}

// TestPlan: the scenarios each --scenario runs, the --sustain default and
// every refusal of bad flags, line for line as testdata/plans.txt has them
// (written by the bench before it had a package of its own).
func TestPlan(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mod  func(*Flags)
	}{
		{"all", func(*Flags) {}},
		{"all-sustain", func(f *Flags) { f.Sustain, f.SustainSet = 30*time.Second, true }},
		{"drain", func(f *Flags) { f.Scenario = "drain" }},
		{"paths", func(f *Flags) { f.Scenario = "paths" }},
		{"held", func(f *Flags) { f.Scenario = "held" }},
		{"prefetch", func(f *Flags) { f.Scenario = "prefetch" }},
		{"latency", func(f *Flags) { f.Scenario = "latency" }},
		{"idle", func(f *Flags) { f.Scenario = "idle" }},
		{"backlog", func(f *Flags) { f.Scenario = "backlog" }},
		{"scale", func(f *Flags) { f.Scenario = "scale" }},
		{"dispatch", func(f *Flags) { f.Scenario = "dispatch" }},
		{"bound", func(f *Flags) { f.Scenario = "bound" }},
		{"peers", func(f *Flags) { f.Scenario = "peers" }},
		{"nope", func(f *Flags) { f.Scenario = "nope" }},
		{"jobs", func(f *Flags) { f.Jobs = 99 }},
		{"backlog-small", func(f *Flags) { f.Backlog = 999 }},
		{"sustain-short", func(f *Flags) { f.Sustain, f.SustainSet = 5*time.Second, true }},
		{"idle0", func(f *Flags) { f.IdleSecs = 0 }},
		{"cell-neg", func(f *Flags) { f.CellSecs = -1 }},
		{"samples0", func(f *Flags) { f.Samples = 0 }},
		{"rounds0", func(f *Flags) { f.Rounds = 0 }},
		{"scale-bad", func(f *Flags) { f.ScaleBacklogs = "10,x" }},
		{"scale-empty", func(f *Flags) { f.ScaleConcurrency = " , " }},
		{"scale-zero", func(f *Flags) { f.ScaleConcurrency = "0" }},
		{"cold", func(f *Flags) { f.Scenario = "cold" }},
		{"masters", func(f *Flags) { f.Scenario = "masters"; f.Masters = "1,3" }},
		{"masters-bad", func(f *Flags) { f.Scenario = "masters"; f.Masters = "1,x" }},
		{"masters-many", func(f *Flags) { f.Scenario = "masters"; f.Masters = "1,1001" }},
		{"payload", func(f *Flags) { f.Scenario = "payload" }},
		{"payload-sizes-bad", func(f *Flags) { f.Scenario = "payload"; f.PayloadSizes = "512,0" }},
		{"payload-mb0", func(f *Flags) { f.Scenario = "payload"; f.PayloadMB = 0 }},
	}
	var got strings.Builder
	for _, c := range cases {
		f := defaultFlags()
		c.mod(&f)
		// The sustain the plan settles on, also when it refuses the flags.
		sf := f
		_, _ = benchPlan(&sf)
		p, err := NewPlan(f)
		if err == nil && p.f.Sustain != sf.Sustain {
			t.Errorf("%s: plan's sustain %s, benchPlan's %s", c.name, p.f.Sustain, sf.Sustain)
		}
		fmt.Fprintf(&got, "%s\t%v\t%s\t%v\n", c.name, p.Scenarios(), sf.Sustain, err)
	}
	want, err := os.ReadFile("testdata/plans.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("plans:\n%s\nwant (testdata/plans.txt):\n%s", got.String(), want)
	}
}

// sampleBench is a bench with a few rows and results, as print sees it.
func sampleBench() *bench {
	b := &bench{rep: benchReport{Database: "postgres://postgres@127.0.0.1:5432/bench", CPUs: 2,
		StartedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Scenarios: []string{"bound", "drain", "scale"}}}
	b.addRate("bound", "before the bound", b.rate(1000, 2*time.Second), "no ratio yet")
	b.ref = 123456.7
	b.rep.Bound = &boundResult{Connections: 4, Batch1000: b.rate(200000, 1620*time.Millisecond), Reference: 123456.7, Statement: "S"}
	b.rep.Drain = &drainResult{Supervisor: "bench", Processes: 2, Conc: 64, Rate: b.rate(200000, 6*time.Second), Attempts: 200000, Started: 2}
	b.addRate("drain", "200000 no-op jobs, first claim to queue empty", b.rep.Drain.Rate, "master + 2 fleet:work × concurrency 64, history recorded")
	ms := []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}
	b.addRow("latency", "dispatch → handler start", statsOf(ms).String(), "3 samples")
	b.rep.Latency = &latencyResult{Samples: 3, DispatchToStart: statsOf(ms)}
	b.rep.Scale = &scaleResult{CellSecs: 15, Cells: []scaleCell{{Backlog: 10000, Concurrency: 1, Rate: b.rate(150000, 15*time.Second), TimeBoxed: true}},
		Grid: []string{"backlog \\ concurrency\t1\t16", "10000\t10000/s (0.081×)\t20000/s (0.162×)", "(each cell time-boxed; × = ratio to the bound)"}}
	b.rep.Cleanup.Jobs, b.rep.Cleanup.History = 7, 9
	return b
}

// TestPrint: the table and the JSON document are byte for byte what the
// bench printed before it had a package of its own (testdata/report.*).
func TestPrint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		json bool
		file string
	}{{false, "testdata/report.txt"}, {true, "testdata/report.json"}} {
		b := sampleBench()
		b.f.JSON = c.json
		var out bytes.Buffer
		if err := b.print(&out); err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if out.String() != string(want) {
			t.Errorf("print (json %v):\n%s\nwant (%s):\n%s", c.json, out.String(), c.file, want)
		}
	}
}

// keyPaths appends the path of every key of the decoded JSON value v.
func keyPaths(prefix string, v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			p := prefix + "." + k
			*out = append(*out, p)
			keyPaths(p, vv, out)
		}
	case []any:
		for _, vv := range x {
			keyPaths(prefix+"[]", vv, out)
		}
	}
}

// TestReportKeys: with every scenario's result present, the JSON document
// has exactly the keys of testdata/report-keys.txt: the document's shape
// before the bench had a package of its own, and the durable bound.
func TestReportKeys(t *testing.T) {
	t.Parallel()
	rep := benchReport{Bound: &boundResult{Durable: &durableResult{}}, Drain: &drainResult{VsDurable: 1}, Latency: &latencyResult{}, Dispatch: &dispatchResult{},
		Idle: &idleResult{}, Backlog: &backlogResult{}, Held: &heldResult{Free: heldPath{Rounds: []heldRound{{}}}, Held: heldPath{Rounds: []heldRound{{DeadRows: 1}}}},
		Prefetch: &prefetchResult{Settings: []prefetchSetting{{Runs: []prefetchRun{{SlowPerWorker: []int{4}, JobsPerWorker: []int{4}}}}}},
		Cold:     &coldResult{Master: coldPath{Rounds: []coldRound{{}}}, One: coldPath{Rounds: []coldRound{{}}}},
		Masters:  &mastersResult{Cases: []mastersCase{{coldPath: coldPath{Rounds: []coldRound{{}}}}}}, Scale: &scaleResult{Cells: []scaleCell{{}}, Grid: []string{"x"}},
		Peers: &peersResult{Paths: []peerPath{{Name: "n", Version: "v", Settings: "s", Missing: "m", JobsPerSec: []float64{1}, FromStart: []float64{1},
			Median: 1, MedianFromStart: 1, MasterVs: 1, MasterVsFromStart: 1}}},
		Payload: &payloadResult{Sizes: []payloadSize{{}}}}
	doc, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	var got []string
	keyPaths("", v, &got)
	slices.Sort(got)
	raw, err := os.ReadFile("testdata/report-keys.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(raw))
	for _, k := range got {
		if !slices.Contains(want, k) {
			t.Errorf("JSON key %s is new", k)
		}
	}
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("JSON key %s is gone", k)
		}
	}
}

func TestStatsOf(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := statsOf(ds)
	if want := (latencyStats{P50: 50, P95: 95, P99: 99, Max: 100}); got != want {
		t.Errorf("statsOf 1..100 ms = %+v, want %+v", got, want)
	}
	if !slices.IsSortedFunc(ds, func(a, b time.Duration) int { return int(b - a) }) {
		t.Error("statsOf sorted its argument")
	}
	if got := statsOf(nil); got != (latencyStats{}) {
		t.Errorf("statsOf(nil) = %+v", got)
	}
}

func TestChildEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := &bench{opts: Options{Environ: []string{"A=1"}, Dir: dir, ConfigPath: "config/app.toml"},
		url: "postgres://x/db", runID: "42-run"}
	cfg := config.Default()
	cfg.Log.Level = "warn"
	b.cfg = &cfg
	env, err := b.childEnv("EXTRA=2")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=1", "APP_DATABASE__URL=postgres://x/db", "APP_DATABASE__POOLER=", "APP_DATABASE__DIRECT_URL=", "APP_LOG__LEVEL=warn",
		"APP_CONFIG=" + dir + "/config/app.toml", EnvRun + "=42-run", "EXTRA=2"}
	if !slices.Equal(env, want) {
		t.Errorf("childEnv = %q, want %q", env, want)
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	jobs := queue.NewRegistry()
	Register(jobs)
	if _, ok := jobs.Lookup(JobName); !ok {
		t.Fatalf("Register added no %s", JobName)
	}
	// An app's own handler of that name stays.
	own := queue.NewRegistry()
	ran := false
	own.Handle(JobName, func(context.Context, *queue.Job) error { ran = true; return nil })
	Register(own)
	h, _ := own.Lookup(JobName)
	if err := h(context.Background(), &queue.Job{}); err != nil || !ran {
		t.Errorf("Register replaced the app's own %s (ran %v, %v)", JobName, ran, err)
	}
}

// TestRegisterStamp: the stamp handler notes each job's id and start in
// its file, one line each, in the order they ran, which stampOf reads; with
// no file it does nothing; an app's own handler of that name stays.
func TestRegisterStamp(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stamps")
	jobs := queue.NewRegistry()
	RegisterStamp(jobs, path)
	h, ok := jobs.Lookup(StampJobName)
	if !ok {
		t.Fatalf("RegisterStamp added no %s", StampJobName)
	}
	before := time.Now()
	for _, id := range []int64{7, 12, 70} {
		if err := h(context.Background(), &queue.Job{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "7 ") || !strings.HasPrefix(lines[1], "12 ") || !strings.HasPrefix(lines[2], "70 ") {
		t.Fatalf("stamps:\n%s", raw)
	}
	var last time.Time
	for _, id := range []int64{7, 12, 70} {
		at, err := stampOf(path, id)
		if err != nil {
			t.Fatal(err)
		}
		if at.Before(before.Truncate(time.Microsecond)) || at.Before(last) {
			t.Errorf("job %d started at %v: before the calls (%v) or the job before it (%v)", id, at, before, last)
		}
		last = at
	}
	if _, err := stampOf(path, 1); err == nil || !strings.Contains(err.Error(), "job 1 ran, but its handler noted no start") {
		t.Errorf("stampOf of a job with no line: %v", err)
	}

	none := queue.NewRegistry()
	RegisterStamp(none, "")
	h, _ = none.Lookup(StampJobName)
	if err := h(context.Background(), &queue.Job{ID: 1}); err != nil {
		t.Errorf("the stamp handler with no file: %v", err)
	}

	own := queue.NewRegistry()
	ran := false
	own.Handle(StampJobName, func(context.Context, *queue.Job) error { ran = true; return nil })
	RegisterStamp(own, path)
	h, _ = own.Lookup(StampJobName)
	if err := h(context.Background(), &queue.Job{}); err != nil || !ran {
		t.Errorf("RegisterStamp replaced the app's own %s (ran %v, %v)", StampJobName, ran, err)
	}
}
