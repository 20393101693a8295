package process

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/testwait"
)

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// The HTTP listener's lifecycle: Stop before Start is safe and forbids a
// Start; Start serves until Stop, whatever becomes of its context; a
// second Start fails; Stop twice returns; after Stop nothing listens.
func TestHTTPServerLifecycle(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

	never := newHTTPServer(freeAddr(t), ok, log)
	never.Stop()
	never.Stop()
	if err := never.Start(context.Background()); err == nil {
		t.Fatal("a Start after Stop succeeded")
	}

	addr := freeAddr(t)
	s := newHTTPServer(addr, ok, log)
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel() // the master's context ends: its probes still answer
	if err := s.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("GET after the start context ended: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Fatalf("body %q", b)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(s.Stop)
	}
	wg.Wait()
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("something still listens after Stop")
	}
}

// A port in use fails Start, before anything is served, saying which
// setting to change.
func TestHTTPServerPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := newHTTPServer(ln.Addr().String(), http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	err = s.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "fleet.http.addr") {
		t.Fatalf("Start on a port in use: %v", err)
	}
	s.Stop()
}

// A request that hangs until its context ends (a query on a frozen
// database) holds Stop for at most httpStopTimeout: its context ends, and
// Stop returns once it has returned.
func TestHTTPServerStopEndsAHangingRequest(t *testing.T) {
	t.Parallel()
	entered, returned := make(chan struct{}), make(chan struct{})
	var cause error
	hang := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		defer close(returned)
		close(entered)
		<-r.Context().Done()
		cause = r.Context().Err()
	})
	addr := freeAddr(t)
	s := newHTTPServer(addr, hang, slog.New(slog.DiscardHandler))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	client := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		client <- err
	}()
	<-entered
	start := time.Now()
	s.Stop()
	// The request hangs until Stop's bound cuts it: past the bound, only
	// a hang fails (testwait.Hang).
	took := time.Since(start)
	t.Logf("Stop took %s with a hanging request; the bound is %s", took.Round(time.Millisecond), httpStopTimeout)
	if took > httpStopTimeout+testwait.Hang {
		t.Errorf("Stop took %s with a hanging request; the bound is %s", took, httpStopTimeout)
	}
	select {
	case <-returned:
	default:
		t.Fatal("Stop returned before the hanging request did")
	}
	if !errors.Is(cause, context.Canceled) {
		t.Errorf("the request's context ended with %v, want canceled", cause)
	}
	<-client
}
