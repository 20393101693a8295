package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fleet-go/fleet/dashboard"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/metrics"
)

// httpStopTimeout bounds the HTTP listener's stop: requests still running
// get most of it to finish, then their contexts end and their connections
// close. A request hanging on a frozen database must not hold the stop:
// see the stop bound in docs/operating.md.
const httpStopTimeout = 2 * time.Second

// httpServer serves the master's HTTP endpoints (/metrics, /healthz,
// /readyz, the dashboard) with the lifecycle of the master's services:
// Start listens, so a port in use fails it before anything is served,
// then serves from its own goroutine until Stop, whatever becomes of
// Start's context (a draining master still answers its probes). Stop
// shuts the server down within httpStopTimeout, ending the contexts of
// the requests still running, and returns once they have returned; it is
// safe before Start and twice.
type httpServer struct {
	addr    string
	handler http.Handler
	log     *slog.Logger

	mu       sync.Mutex
	started  bool
	stopped  bool
	stopDone chan struct{} // closed when the first Stop returns
	srv      *http.Server
	cancel   context.CancelFunc // the requests' contexts
	served   chan struct{}      // closed when Serve returned
	inflight int                // requests being handled
	idle     chan struct{}      // made by a Stop waiting for them, closed when they are done
}

func newHTTPServer(addr string, handler http.Handler, log *slog.Logger) *httpServer {
	return &httpServer{addr: addr, handler: handler, log: log}
}

// Start listens on the server's address and serves until Stop.
func (s *httpServer) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return errors.New("http listener: stopped before it started")
	case s.started:
		return errors.New("http listener: already started")
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("fleet.http.addr %s: %w (set another address, or an empty one to turn the listener off)", s.addr, err)
	}
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.started, s.cancel, s.served = true, cancel, make(chan struct{})
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base }}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http listener stopped", "addr", s.addr, "err", err)
		}
	}()
	return nil
}

// serve handles one request, counted so that Stop can wait for it.
func (s *httpServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		http.Error(w, "the master is stopping", http.StatusServiceUnavailable)
		return
	}
	s.inflight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.inflight--; s.inflight == 0 && s.idle != nil {
			close(s.idle)
		}
		s.mu.Unlock()
	}()
	s.handler.ServeHTTP(w, r)
}

// Stop shuts the server down, gracefully for most of httpStopTimeout,
// then by ending the requests' contexts and closing their connections,
// and waits for the requests to return. A second Stop waits for the
// first.
func (s *httpServer) Stop() {
	s.mu.Lock()
	if s.stopped {
		done := s.stopDone
		s.mu.Unlock()
		if done != nil {
			<-done
		}
		return
	}
	s.stopped = true
	if !s.started {
		s.mu.Unlock()
		return
	}
	s.stopDone = make(chan struct{})
	defer close(s.stopDone)
	s.mu.Unlock()

	sctx, cancel := context.WithTimeout(context.Background(), httpStopTimeout*3/4)
	err := s.srv.Shutdown(sctx)
	cancel()
	s.cancel()
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.served
	s.mu.Lock()
	if s.inflight == 0 {
		s.mu.Unlock()
		return
	}
	s.idle = make(chan struct{})
	idle := s.idle
	s.mu.Unlock()
	t := time.NewTimer(httpStopTimeout / 4)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
		s.log.Warn("http listener stopped with requests still running: they ignore their context", "addr", s.addr)
	}
}

// httpMux routes the master's endpoints: /metrics, /healthz (the process
// answers), /readyz (ready says so) and, unless dash is nil, the dashboard
// under its path.
func httpMux(col *metrics.Collector, ready func() master.Readiness, dash *dashboard.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	if dash != nil {
		mux.Handle(dash.Path(), dash)
		mux.Handle(dash.Path()+"/", dash)
	}
	mux.Handle("GET /metrics", metrics.Handler(col))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeProbe(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		r := ready()
		code := http.StatusOK
		if !r.Ready {
			code = http.StatusServiceUnavailable
		}
		writeProbe(w, code, r)
	})
	return mux
}

// writeProbe writes a probe's answer as one line of JSON, never cached.
func writeProbe(w http.ResponseWriter, code int, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
