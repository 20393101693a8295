package process

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/spawner/spawnertest"
	"github.com/fleet-go/fleet/supervisor"
)

// masterServices is the master process's order, HTTP listener included.
var masterServices = []string{"pool", "dashboard", "metrics", "http server", "master"}

// testMasterProcess is a master process on a fresh database with fake
// children, its HTTP listener on addr (none when empty), whose hooks note
// what they were told in calls.
func testMasterProcess(t *testing.T, url, addr string, calls *[]string, mu *sync.Mutex) (MasterProcess, *spawnertest.FakeSpawner) {
	t.Helper()
	cfg := config.Default()
	cfg.Database.URL = url
	cfg.Fleet.HTTP.Addr = addr
	cfg.Fleet.Dashboard = true
	sups, err := supervisor.Resolve(SupervisorOptions(&cfg, true))
	if err != nil {
		t.Fatal(err)
	}
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		*calls = append(*calls, s)
	}
	fake := spawnertest.NewFakeSpawner()
	sig := new(lifecycle.Signal[string])
	sig.Init()
	return MasterProcess{
		MasterOptions: MasterOptions{Config: &cfg, Name: "m1", Logger: slog.New(slog.DiscardHandler), Version: "test"},
		Supervisors:   sups,
		Spawner:       fake,
		Serving: func(addr, path string) {
			note("serving " + path)
		},
		Running:   func(m *master.Master, _ master.Settings) { note("running " + m.Name()) },
		Stopped:   func(master.Summary) { note("stopped") },
		lifecycle: sig,
	}, fake
}

// The master process starts its services in order (pool, dashboard,
// metrics, HTTP server, master) and stops them in the reverse when its
// context ends: the probes answer while the master runs, nothing listens
// once it has stopped, and the hooks are told in that order.
func TestMasterProcessOrder(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	var mu sync.Mutex
	var calls []string
	p, fake := testMasterProcess(t, pgtest.URL(t), addr, &calls, &mu)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := RunMaster(ctx, p)
		done <- err
	}()
	var got []string
	for range masterServices {
		got = append(got, p.lifecycle.Wait(t))
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	if err := fake.WaitRunning(wctx, 1); err != nil {
		t.Fatalf("children: %v", err)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("healthz while the master runs: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz while the master runs: %d", resp.StatusCode)
	}
	cancel()
	for range masterServices {
		got = append(got, p.lifecycle.Wait(t))
	}
	if err := <-done; err != nil {
		t.Fatalf("RunMaster: %v", err)
	}
	if want := lifecycle.Sequence(masterServices); !slices.Equal(got, want) {
		t.Errorf("services:\n got %q\nwant %q", got, want)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("something still listens after the master process stopped")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"serving /_fleet", "running m1", "stopped"}; !slices.Equal(calls, want) {
		t.Errorf("hooks: %q, want %q", calls, want)
	}
}

// A port in use leaves the master running without its HTTP listener:
// the order is the same, and Serving is not called.
func TestMasterProcessPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var calls []string
	p, fake := testMasterProcess(t, pgtest.URL(t), ln.Addr().String(), &calls, &mu)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := RunMaster(ctx, p)
		done <- err
	}()
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	if err := fake.WaitRunning(wctx, 1); err != nil {
		t.Fatalf("children: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunMaster: %v", err)
	}
	var got []string
	for range 2 * len(masterServices) {
		got = append(got, p.lifecycle.Wait(t))
	}
	if want := lifecycle.Sequence(masterServices); !slices.Equal(got, want) {
		t.Errorf("services:\n got %q\nwant %q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"running m1", "stopped"}; !slices.Equal(calls, want) {
		t.Errorf("hooks: %q, want %q", calls, want)
	}
}

// A database that does not answer fails the master's pool as it opens,
// to read the server's room, with ErrUnreachable, before any service is
// built: none starts or stops, and the master's hooks are not called.
// Behind a pooler, where nothing is read, the pool's first connection
// fails the same way.
func TestMasterProcessUnreachableDatabase(t *testing.T) {
	t.Parallel()
	for _, pooler := range []string{config.PoolerNone, config.PoolerSession} {
		var mu sync.Mutex
		var calls []string
		p, _ := testMasterProcess(t, "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", "", &calls, &mu)
		p.Config.Database.Pooler = pooler
		_, err := RunMaster(t.Context(), p)
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("pooler %s: RunMaster on an unreachable database: %v, want ErrUnreachable", pooler, err)
		}
		p.lifecycle.None(t, "pooler "+pooler+": a service event after the failure")
		mu.Lock()
		if len(calls) != 0 {
			t.Errorf("pooler %s: hooks called: %q", pooler, calls)
		}
		mu.Unlock()
	}
}
