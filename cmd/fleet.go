package cmd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/dashboard"
	"github.com/fleet-go/fleet/internal/backoff"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/metrics"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// supervisorOptions turns the fleet section into supervisor.Options.
func supervisorOptions(cfg *config.Config, withOnly bool) supervisor.Options {
	o := supervisor.Options{
		Supervisors:        map[string]supervisor.SupervisorOptions{},
		DefaultQueues:      cfg.Queue.Queues,
		DefaultQueue:       cfg.Queue.DefaultQueue,
		DefaultConcurrency: cfg.Queue.Workers,
		Driver:             cfg.Queue.Driver,
		CheckQueue:         func(q string) error { return queue.CheckQueue("the queue name", q) },
	}
	if withOnly {
		o.Only = cfg.Fleet.Only
	}
	for name, s := range cfg.Fleet.Supervisors {
		o.Supervisors[name] = supervisor.SupervisorOptions{
			Queues: s.Queues, Balance: s.Balance,
			MinProcesses: s.MinProcesses, MaxProcesses: s.MaxProcesses, Concurrency: s.Concurrency,
			FleetMaxProcesses: s.FleetMaxProcesses,
			MaxJobs:           s.MaxJobs, MaxMemoryMB: s.MaxMemoryMB, MaxTimeSecs: s.MaxTimeSecs,
			Tries: s.Tries, Backoff: s.Backoff, TimeoutSecs: s.TimeoutSecs,
		}
	}
	return o
}

// masterSettings turns the configuration into master settings.
func masterSettings(cfg *config.Config, sups []supervisor.Supervisor, version string) master.Settings {
	timeout := time.Duration(cfg.Queue.TimeoutSecs) * time.Second
	for _, s := range sups {
		timeout = max(timeout, s.Timeout)
	}
	return master.Settings{
		LongWait:         cfg.Fleet.LongWait,
		LongWaitCooldown: time.Duration(cfg.Fleet.LongWaitCooldownMinutes) * time.Minute,
		Trim: store.TrimParams{
			CompletedHours: cfg.Fleet.Trim.CompletedHours,
			FailedDays:     cfg.Fleet.Trim.FailedDays,
			MetricsDays:    cfg.Fleet.Trim.MetricsDays,
		},
		BalanceCooldown: time.Duration(cfg.Fleet.BalanceCooldownSecs) * time.Second,
		BalanceMaxShift: cfg.Fleet.BalanceMaxShift,
		TTL:             time.Duration(cfg.Fleet.MasterTTLSecs) * time.Second,
		BeatInterval:    time.Duration(cfg.Fleet.BeatIntervalMs) * time.Millisecond,
		OnStop:          cfg.Fleet.OnStop,
		Linger:          time.Duration(cfg.Fleet.LingerSecs) * time.Second,
		StartTimeout:    time.Duration(cfg.Fleet.StartTimeoutSecs) * time.Second,
		DefaultTries:    cfg.Queue.Tries,
		DefaultTimeout:  timeout,
		TimeoutGrace:    time.Duration(cfg.Queue.TimeoutGraceSecs) * time.Second,
		Version:         version,
	}
}

// describeBudget renders a budget for people: "at most 38 (the master 4,
// its dashboard 2, 8 processes × 4)", and the cap when there is one.
func describeBudget(b supervisor.Budget) string {
	parts := []string{fmt.Sprintf("the master %d", b.Master)}
	if b.Dashboard > 0 {
		parts = append(parts, fmt.Sprintf("its dashboard %d", b.Dashboard))
	}
	procs, capped := b.Processes, ""
	if b.Cap > 0 {
		procs, capped = b.Limit, fmt.Sprintf(", within fleet.max_connections = %d", b.Cap)
	}
	parts = append(parts, fmt.Sprintf("%d processes × %d", procs, b.Worker))
	return fmt.Sprintf("at most %d (%s%s)", b.Total, strings.Join(parts, ", "), capped)
}

// connectionBudget is the most connections the master and its workers
// open (see supervisor.ConnectionBudget), from database.max_conns and
// fleet.max_connections.
func connectionBudget(cfg *config.Config, sups []supervisor.Supervisor) (supervisor.Budget, error) {
	return supervisor.ConnectionBudget(sups, supervisor.BudgetOptions{
		Pool: cfg.Database.MaxConns, Cap: cfg.Fleet.MaxConnections,
		Dashboard: cfg.Fleet.HTTP.Addr != "" && cfg.Fleet.Dashboard,
	})
}

// masterName is fleet.name, else the variable fleet.name_env names (looked
// up with getenv, in the app's environment), else empty (the master's
// default, host:pid:nonce).
func masterName(cfg *config.Config, getenv func(string) string) string {
	if cfg.Fleet.Name != "" {
		return cfg.Fleet.Name
	}
	if cfg.Fleet.NameEnv != "" {
		return getenv(cfg.Fleet.NameEnv)
	}
	return ""
}

// getenv looks key up in the app's environment (App.Environ), the last
// entry winning as in a process environment.
func (r *runner) getenv(key string) string {
	v := ""
	for _, kv := range r.app.Environ {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// checkNameEnv checks the master name read from the variable
// fleet.name_env names, as config checks fleet.name: at most
// config.MaxMasterNameBytes, no tab, newline or brace. An overlong value
// is cut in the message.
func checkNameEnv(cfg *config.Config, getenv func(string) string) error {
	if cfg.Fleet.Name != "" || cfg.Fleet.NameEnv == "" {
		return nil
	}
	v := getenv(cfg.Fleet.NameEnv)
	shown := v
	if len(shown) > 64 {
		shown = strings.ToValidUTF8(shown[:64], "") + "…"
	}
	switch {
	case len(v) > config.MaxMasterNameBytes:
		return fmt.Errorf("fleet.name_env: $%s must be at most %d bytes, got %d bytes (%q)", cfg.Fleet.NameEnv, config.MaxMasterNameBytes, len(v), shown)
	case strings.ContainsAny(v, "\t\n\r{}"):
		return fmt.Errorf("fleet.name_env: $%s must hold no tab, newline or brace, got %q", cfg.Fleet.NameEnv, shown)
	}
	return nil
}

func (r *runner) fleetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "fleet",
		Short: "Run the fleet master: start, balance and supervise fleet:work processes",
		Long: "The master runs no jobs. It starts fleet:work children of this executable for each " +
			"supervisor, balances them across queues, recycles and restarts them, applies pause and " +
			"terminate requests, and releases the jobs of workers and masters that died. " +
			"SIGTERM or SIGINT stops every child gracefully.",
		Args: cobra.NoArgs,
		RunE: r.fleet,
	}
}

func (r *runner) fleet(c *cobra.Command, _ []string) error {
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	sups, err := supervisor.Resolve(supervisorOptions(cfg, true))
	if err != nil {
		return err
	}
	// Bad schedules fail the boot before anything connects, and so does a
	// connection cap the fleet cannot fit in.
	if _, err := periodicSchedules(cfg, r.app.Jobs); err != nil {
		return err
	}
	budget, err := connectionBudget(cfg, sups)
	if err != nil {
		return err
	}
	db, err := databaseOf(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The name is settled before the first connection, which carries it
	// in application_name (so fleet:masters can count the connections of
	// this master and of its workers, whose names start with it).
	name := cmp.Or(masterName(cfg, r.getenv), master.DefaultName())
	pool, err := openPool(ctx, db, budget.Master, "fleet master "+name)
	if err != nil {
		return err
	}
	defer closePool(pool)
	log := r.logger(cfg)
	log.Info("database pooler", "logger", "fleet", "pooler", db.pooler,
		"workers_wake_up", db.wakeups(time.Duration(cfg.Queue.PollIntervalMs)*time.Millisecond))
	db.checkDirect(ctx, "fleet master "+name, log)
	sp, err := spawner.NewProcessSpawner(spawner.ProcessOptions{Dir: r.app.Dir, Output: r.app.Stderr, Logger: log})
	if err != nil {
		return err
	}
	db.childEnv(sp)
	if r.configPath != "" {
		// Children load configuration the normal way; make sure they find
		// the same file whatever their working directory.
		abs := r.configPath
		if !filepath.IsAbs(abs) {
			if abs, err = filepath.Abs(filepath.Join(r.app.Dir, abs)); err != nil {
				return fmt.Errorf("--config %s: %w", r.configPath, err)
			}
		}
		sp.Env("APP_CONFIG", abs)
	}
	return r.runMaster(ctx, c, cfg, name, sups, store.New(pool), sp)
}

// newMaster builds the master the configuration describes, with the app's
// long-wait listeners; the demo and the fleet command share it.
func (r *runner) newMaster(cfg *config.Config, name string, sups []supervisor.Supervisor, st *store.Store, sp spawner.Spawner) (*master.Master, master.Settings, error) {
	if err := checkNameEnv(cfg, r.getenv); err != nil {
		return nil, master.Settings{}, err
	}
	settings := masterSettings(cfg, sups, versionInfo(r.app.Version).Short())
	settings.Name = name
	budget, err := connectionBudget(cfg, sups)
	if err != nil {
		return nil, settings, err
	}
	settings.Connections = budget
	settings.Logger = r.logger(cfg)
	onLongWait, err := r.longWaitListeners(cfg, settings.Logger)
	if err != nil {
		return nil, settings, err
	}
	settings.OnLongWait = onLongWait
	if settings.Periodic, err = periodicSchedules(cfg, r.app.Jobs); err != nil {
		return nil, settings, err
	}
	m, err := master.New(st, sups, master.WithSpawner(sp), master.WithSettings(settings))
	return m, settings, err
}

// describeSupervisors renders "default (auto: default,mail, up to 4
// processes); ..." for people.
func describeSupervisors(sups []supervisor.Supervisor) string {
	names := make([]string, len(sups))
	for i, s := range sups {
		names[i] = fmt.Sprintf("%s (%s: %s, up to %d processes)", s.Name, s.Balance, strings.Join(s.Queues, ","), s.MaxProcesses)
	}
	return strings.Join(names, "; ")
}

// runMaster runs a master over sups with sp until ctx ends or a terminate
// request arrives, then prints its summary.
func (r *runner) runMaster(ctx context.Context, c *cobra.Command, cfg *config.Config, name string, sups []supervisor.Supervisor, st *store.Store, sp spawner.Spawner) error {
	m, settings, err := r.newMaster(cfg, name, sups, st, sp)
	if err != nil {
		return err
	}
	if addr := cfg.Fleet.HTTP.Addr; addr != "" {
		var dash *dashboard.Handler
		if cfg.Fleet.Dashboard {
			// The dashboard reads on a small pool of its own, so that a
			// burst of its queries never makes the master's beat wait for a
			// connection.
			pc := st.Pool().Config().Copy()
			pc.MaxConns, pc.MinConns = int32(max(settings.Connections.Dashboard, 1)), 0
			dashPool, err := pgxpool.NewWithConfig(ctx, pc)
			if err != nil {
				return fmt.Errorf("open the dashboard's database pool: %w", err)
			}
			defer closePool(dashPool)
			svcOpts := fleet.ConfigOptions(cfg)
			svcOpts.Periodic = settings.Periodic
			dash = dashboard.New(fleet.New(dashPool, svcOpts), dashboard.Options{Path: cfg.Fleet.Path, Logger: settings.Logger})
		}
		col := metrics.NewCollector(st.Pool(), metrics.Options{
			Beat: m.Membership(), Logger: settings.Logger, Master: m.Name(), Instance: m.Instance(),
			Version: settings.Version, LongWait: cfg.Fleet.LongWait,
		})
		srv := newHTTPServer(addr, httpMux(col, m.Readiness, dash), settings.Logger)
		if err := srv.Start(ctx); err != nil {
			// A second master on the host (the default address taken) still
			// supervises its workers; only its probes and gauges are missing.
			settings.Logger.Warn("the master runs without its HTTP listener (/metrics, /healthz, /readyz, the dashboard)", "logger", "fleet", "err", err)
		} else {
			defer func() {
				srv.Stop()
				// Hand the fleet-wide families over to another master now
				// rather than when the lease runs out.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				defer cancel()
				if err := col.Release(rctx); err != nil {
					settings.Logger.Warn("release the metrics exporter lease", "logger", "fleet", "err", err)
				}
			}()
			fmt.Fprintf(c.OutOrStdout(), "serving /metrics, /healthz and /readyz on http://%s\n", addr)
			if dash != nil {
				fmt.Fprintf(c.OutOrStdout(), "serving the dashboard on http://%s%s (sign in with a token of app fleet:token create)\n", addr, dash.Path())
			}
		}
	}
	fmt.Fprintf(c.OutOrStdout(), "fleet master %s running supervisors %s\n", m.Name(), describeSupervisors(sups))
	fmt.Fprintf(c.OutOrStdout(), "connections: %s\n", describeBudget(settings.Connections))
	sum, err := m.Run(ctx)
	unsaved := ""
	if sum.Unsaved > 0 {
		unsaved = fmt.Sprintf(", %d outcomes not written (their jobs run again)", sum.Unsaved)
	}
	fmt.Fprintf(c.OutOrStdout(), "fleet master stopped: %d workers started, %d recycled, %d crashed, %d jobs run%s\n",
		sum.Started, sum.Recycled, sum.Crashed, sum.Jobs, unsaved)
	return err
}

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

// longWaitListeners combines the app's listener and the configured webhook
// into the master's OnLongWait (nil when there is neither).
func (r *runner) longWaitListeners(cfg *config.Config, log *slog.Logger) (func(context.Context, fleet.LongWaitDetected), error) {
	var listeners []func(context.Context, fleet.LongWaitDetected)
	if r.app.OnLongWait != nil {
		listeners = append(listeners, r.app.OnLongWait)
	}
	if cfg.Fleet.LongWaitWebhook != "" {
		hook, err := fleet.WebhookNotifier(cfg.Fleet.LongWaitWebhook, nil, log)
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, hook)
	}
	if len(listeners) == 0 {
		return nil, nil
	}
	return func(ctx context.Context, e fleet.LongWaitDetected) {
		for _, l := range listeners {
			l(ctx, e)
		}
	}, nil
}

// withStore runs fn with a store on the configured database.
func (r *runner) withStore(ctx context.Context, fn func(*config.Config, *store.Store) error) error {
	cfg, err := r.loadConfig()
	if err != nil {
		return err
	}
	db, err := databaseOf(cfg)
	if err != nil {
		return err
	}
	pool, err := openPool(ctx, db, 2, "fleet cli")
	if err != nil {
		return err
	}
	defer closePool(pool)
	return fn(cfg, store.New(pool))
}

// checkSupervisor fails unless name is a supervisor of this app's config.
func checkSupervisor(cfg *config.Config, name string) error {
	sups, err := supervisor.Resolve(supervisorOptions(cfg, false))
	if err != nil {
		return err
	}
	var have []string
	for _, s := range sups {
		have = append(have, s.Name)
	}
	if !slices.Contains(have, name) {
		return notFoundf("no supervisor named %q in this app's configuration (have: %s)", name, strings.Join(have, ", "))
	}
	return nil
}

// pauseAction is what fleet:pause or fleet:continue does to a queue, a
// supervisor, or every supervisor ("").
type pauseAction struct {
	use, short, verb, queueHelp string
	queue                       func(*fleet.Service, context.Context, string) error
	supervisor                  func(*fleet.Service, context.Context, string) error
}

func (r *runner) pauseActionCommand(a pauseAction) *cobra.Command {
	var queueName string
	var asJSON bool
	c := &cobra.Command{
		Use:   a.use,
		Short: a.short,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if c.Flags().Changed("queue") {
				// An explicit empty --queue must not fall through to
				// "every supervisor".
				if err := queue.CheckQueue("--queue", queueName); err != nil {
					return usage(err)
				}
			}
			return r.withService(c.Context(), func(cfg *config.Config, svc *fleet.Service) error {
				ctx, out := c.Context(), c.OutOrStdout()
				var target map[string]any
				switch {
				case queueName != "" && len(args) > 0:
					return usagef("give a supervisor or --queue, not both")
				case queueName != "":
					if a.verb == "paused" {
						warnUnworkedQueue(c, cfg, queueName)
					}
					if err := a.queue(svc, ctx, queueName); err != nil {
						return err
					}
					target = map[string]any{"queue": queueName}
					if !asJSON {
						fmt.Fprintf(out, "%s queue %s in every supervisor: every master applies it within a tick\n", a.verb, queueName)
					}
				case len(args) == 1:
					if err := checkSupervisor(cfg, args[0]); err != nil {
						return err
					}
					if err := a.supervisor(svc, ctx, args[0]); err != nil {
						return err
					}
					target = map[string]any{"supervisor": args[0]}
					if !asJSON {
						fmt.Fprintf(out, "%s supervisor %s: every master applies it within a tick\n", a.verb, args[0])
					}
				default:
					if err := a.supervisor(svc, ctx, ""); err != nil {
						return err
					}
					target = map[string]any{"all": true}
					if !asJSON {
						fmt.Fprintf(out, "%s every supervisor: every master applies it within a tick\n", a.verb)
					}
				}
				if asJSON {
					return printJSON(out, map[string]any{a.verb: target})
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&queueName, "queue", "", a.queueHelp)
	c.Flags().BoolVar(&asJSON, "json", false, "print what changed as JSON")
	return c
}

func (r *runner) pauseCommand() *cobra.Command {
	return r.pauseActionCommand(pauseAction{
		use:        "fleet:pause [SUPERVISOR] | --queue Q",
		short:      "Pause a supervisor (none: every supervisor) or one queue: running jobs finish, no new job starts",
		verb:       "paused",
		queueHelp:  "pause this queue in every supervisor that works it",
		queue:      (*fleet.Service).PauseQueue,
		supervisor: (*fleet.Service).Pause,
	})
}

func (r *runner) continueCommand() *cobra.Command {
	return r.pauseActionCommand(pauseAction{
		use:        "fleet:continue [SUPERVISOR] | --queue Q",
		short:      "Resume a paused supervisor (none: every supervisor) or queue",
		verb:       "continued",
		queueHelp:  "resume this queue",
		queue:      (*fleet.Service).ResumeQueue,
		supervisor: (*fleet.Service).Resume,
	})
}

// statusReport is what fleet:status --json prints.
type statusReport struct {
	Status  fleet.Status   `json:"status"`
	At      time.Time      `json:"at"`
	Masters []fleet.Master `json:"masters"`
	Paused  fleet.Paused   `json:"paused"`
}

func (r *runner) statusCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "fleet:status [--json]",
		Short: "Print Running, Paused or Inactive, the live masters and what is paused; exit 1 when no master is live",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				v, err := svc.Masters(c.Context(), false)
				if err != nil {
					return err
				}
				p, err := svc.PausedState(c.Context())
				if err != nil {
					return err
				}
				out := c.OutOrStdout()
				rep := statusReport{Status: fleet.StatusOf(v.Masters), At: v.At, Masters: v.Masters, Paused: p}
				if asJSON {
					if err := printJSON(out, rep); err != nil {
						return err
					}
				} else {
					fmt.Fprintln(out, rep.Status)
					for _, m := range v.Masters {
						fmt.Fprintf(out, "  %s  %s  pid %d  up %s  beat %.1fs ago\n", m.Name, m.State, m.PID,
							v.At.Sub(m.StartedAt).Round(time.Second), m.BeatAgeSecs)
					}
					printPaused(out, p)
				}
				switch rep.Status {
				case fleet.StatusInactive:
					return &exitError{code: ExitFailure, err: errors.New("no fleet master is live")}
				case fleet.StatusPaused:
					// It said so on stdout: no error line.
					return &exitError{code: ExitPaused, err: errors.New("every live master is paused"), silent: true}
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (with the paused supervisors and queues); exit 1 when no master is live, as without it")
	return c
}

func (r *runner) terminateCommand() *cobra.Command {
	var asJSON, wait bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "fleet:terminate [--wait [--timeout 5m]] [--json]",
		Short: "Stop every running master gracefully (a master started afterwards keeps running)",
		Long: "Stop every running master gracefully; a master started afterwards keeps running. " +
			"With --wait, return once every master that was live is gone (exit 0), or exit 9 at --timeout with those still live.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usagef("--timeout must be positive, got %s", timeout)
			}
			return r.withStore(c.Context(), func(_ *config.Config, st *store.Store) error {
				svc := fleet.New(st.Pool(), fleet.Options{})
				v, err := svc.Masters(c.Context(), false)
				if err != nil {
					return err
				}
				if err := st.StateSet(c.Context(), store.StateTerminate); err != nil {
					return err
				}
				out := c.OutOrStdout()
				if !wait {
					if asJSON {
						return printJSON(out, map[string]any{"terminate": map[string]any{"requested": true, "live_masters": len(v.Masters)}})
					}
					fmt.Fprintf(out, "asked %d running master(s) to terminate; each stops its workers gracefully within a tick\n", len(v.Masters))
					return nil
				}
				if !asJSON {
					fmt.Fprintf(out, "asked %d running master(s) to terminate; waiting up to %s for them to stop\n", len(v.Masters), timeout)
				}
				left, err := waitForMasters(c.Context(), svc, v.Masters, timeout)
				if err != nil {
					return err
				}
				if asJSON {
					if err := printJSON(out, map[string]any{"terminate": map[string]any{"requested": true, "live_masters": len(v.Masters), "still_live": append([]string{}, left...)}}); err != nil {
						return err
					}
				} else if len(left) == 0 {
					fmt.Fprintf(out, "all %d master(s) stopped\n", len(v.Masters))
				}
				if len(left) > 0 {
					return &exitError{code: ExitTimedOut, err: fmt.Errorf("%d master(s) still live after %s: %s", len(left), timeout, strings.Join(left, ", "))}
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print what changed as JSON")
	c.Flags().BoolVar(&wait, "wait", false, "wait until every master that was live has stopped")
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "with --wait: how long to wait before giving up (exit 9)")
	return c
}

// terminatePoll is how often fleet:terminate --wait looks whether the
// masters have stopped.
const terminatePoll = 250 * time.Millisecond

// waitForMasters polls the membership until none of masters (those live
// when the terminate was asked) is live any more, or timeout passes. It
// returns the names of those still live.
func waitForMasters(ctx context.Context, svc *fleet.Service, masters []fleet.Master, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		v, err := svc.Masters(ctx, false)
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		var left []string
		if err == nil {
			live := map[string]bool{}
			for _, m := range v.Masters {
				live[m.Instance] = true
			}
			for _, m := range masters {
				if live[m.Instance] {
					left = append(left, m.Name)
				}
			}
			if len(left) == 0 {
				return nil, nil
			}
		} else {
			for _, m := range masters {
				left = append(left, m.Name)
			}
		}
		if backoff.Sleep(ctx, terminatePoll) != nil {
			if parent := context.Cause(ctx); parent != nil && !errors.Is(parent, context.DeadlineExceeded) {
				return nil, parent
			}
			return left, nil
		}
	}
}
