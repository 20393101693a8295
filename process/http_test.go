package process

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/metrics"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/spawner/spawnertest"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// probe GETs path and returns the status and the decoded JSON body.
func probe(t *testing.T, base, path string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: content type %q", path, ct)
	}
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("GET %s: body %q: %v", path, b, err)
	}
	return resp.StatusCode, body
}

// TestHealthAndReadiness runs a real master (fake children) behind the
// master's mux: /healthz answers 200 throughout; /readyz is 503 before the
// master runs, 200 once its supervisors have their processes and its beat
// is fresh, and 503 again once it drains.
func TestHealthAndReadiness(t *testing.T) {
	pool := pgtest.Pool(t)
	sups, err := supervisor.Resolve(supervisor.Options{
		Supervisors: map[string]supervisor.SupervisorOptions{
			"default": {Queues: []string{"default", "mail"}, Balance: "simple", MaxProcesses: new(2)},
		},
		DefaultConcurrency: 2, DefaultQueue: "default",
	})
	if err != nil {
		t.Fatal(err)
	}
	fake := spawnertest.NewFakeSpawner()
	log := slog.New(slog.DiscardHandler)
	m, err := master.New(store.New(pool), sups, master.WithSpawner(fake), master.WithSettings(master.Settings{
		Tick: 20 * time.Millisecond, TTL: 10 * time.Second, StopTimeout: 5 * time.Second, Logger: log,
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpMux(metrics.NewCollector(pool, metrics.Options{Logger: log}), m.Readiness, nil))
	defer srv.Close()

	if code, body := probe(t, srv.URL, "/healthz"); code != http.StatusOK || body["status"] != "ok" {
		t.Fatalf("healthz: %d %v", code, body)
	}
	code, body := probe(t, srv.URL, "/readyz")
	if code != http.StatusServiceUnavailable || body["ready"] != false || body["reason"] == "" {
		t.Fatalf("readyz before Run: %d %v", code, body)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := m.Run(ctx)
		done <- err
	}()
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	if err := fake.WaitRunning(wctx, 2); err != nil {
		t.Fatalf("children: %v", err)
	}
	// The master publishes its processes at its next tick: wait for it
	// (bounded by wctx, not asserted on time).
	for !m.Readiness().Ready {
		select {
		case <-wctx.Done():
			t.Fatalf("master still starting: %+v", m.Readiness())
		case <-time.After(10 * time.Millisecond):
		}
	}
	code, body = probe(t, srv.URL, "/readyz")
	if code != http.StatusOK || body["ready"] != true || body["state"] != "running" {
		t.Fatalf("readyz while running: %d %v", code, body)
	}
	procs, _ := body["processes"].(map[string]any)
	if g, _ := procs["default"].(map[string]any); g["default"] != 1.0 || g["mail"] != 1.0 {
		t.Errorf("readyz processes: %v", body["processes"])
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("metrics beside the probes: %d", resp.StatusCode)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("master run: %v", err)
	}
	code, body = probe(t, srv.URL, "/readyz")
	if code != http.StatusServiceUnavailable || body["state"] != "draining" {
		t.Fatalf("readyz after stop: %d %v", code, body)
	}
	if code, _ := probe(t, srv.URL, "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz after stop: %d", code)
	}
}

// TestReadyzStaleBeat: a beat older than the ttl is not ready, and the
// answer says why.
func TestReadyzStaleBeat(t *testing.T) {
	col := metrics.NewCollector(pgtest.Pool(t), metrics.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(httpMux(col, func() master.Readiness {
		return master.Readiness{State: "running", ViewAgeSecs: 12, TTLSecs: 10, Reason: "last successful beat 12.0s ago, not within the ttl of 10s"}
	}, nil))
	defer srv.Close()
	code, body := probe(t, srv.URL, "/readyz")
	if code != http.StatusServiceUnavailable || body["ready"] != false || !strings.Contains(body["reason"].(string), "ttl") {
		t.Fatalf("readyz with a stale beat: %d %v", code, body)
	}
}
