package process

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/dashboard"
	"github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/metrics"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// MasterProcess is what RunMaster runs: the master MasterOptions
// describes, over Supervisors, and what the process around it needs.
type MasterProcess struct {
	MasterOptions
	// Supervisors are the master's, resolved from the configuration with
	// fleet.only (SupervisorOptions(cfg, true)).
	Supervisors []supervisor.Supervisor
	// Spawner starts the workers; nil starts fleet:work children of this
	// executable, as Children says, on the master's database.
	Spawner spawner.Spawner
	// Children are the options of the children's spawner when Spawner is
	// nil.
	Children spawner.ProcessOptions
	// ConfigFile is the configuration file the children load (APP_CONFIG),
	// relative to Children.Dir unless absolute; empty for none.
	ConfigFile string

	// Serving is called once the HTTP listener serves, with its address
	// and the dashboard's path ("" without a dashboard). It is not called
	// when the listener could not start: the master runs without it.
	Serving func(addr, dashboardPath string)
	// Running is called as the master starts, once the services before
	// it run.
	Running func(*master.Master, master.Settings)
	// Stopped is called with the master's summary once it has stopped,
	// before the services started before it stop.
	Stopped func(master.Summary)

	// lifecycle, when initialised (by a test), receives "start NAME" and
	// "stop NAME" as the services start and stop.
	lifecycle *lifecycle.Signal[string]
	// pool is the master's pool as fitMaster opened it (its first
	// connection open), sized to the fitted budget; nil: newMasterProcess
	// opens one.
	pool *pgxpool.Pool
}

// RunMaster runs the master process until ctx ends or a terminate request
// arrives. It first opens its pool and reads, on the pool's first
// connection, what the server has room for (its max_connections, reserved
// slots and sessions open: not behind a pooler), and fits the pools and the
// processes in it so that database.reserve_connections stay free, warning
// when the configuration does not fit (see supervisor.FitServer); a
// database that does not answer fails there, with a clear error
// (ErrUnreachable), before anything is built. The process is then an ordered list of services, started in
// this order and stopped in the reverse (package internal/lifecycle):
//
//  1. pool: the master's database pool, which its start checks (a clear
//     error when the database does not answer);
//  2. dashboard: the dashboard's own small pool, so that a burst of its
//     queries never makes the master's beat wait for a connection (with
//     fleet.dashboard and fleet.http.addr);
//  3. metrics: the collector of /metrics, whose stop hands the fleet-wide
//     families over to another master at once, rather than when the
//     lease runs out (with fleet.http.addr);
//  4. http server: /metrics, /healthz, /readyz and the dashboard (with
//     fleet.http.addr). It starts before the master, so that a port in
//     use is known before anything is written (the master then runs
//     without it, saying so: a second master on a host still supervises
//     its workers), and stops after it, so that a draining master still
//     answers its probes;
//  5. master: package master's Master, whose own services are listed in
//     its package doc. Its end (a terminate request) ends the process.
//
// It returns the master's summary and error; when a service fails to
// start, every service is stopped and its error returned.
func RunMaster(ctx context.Context, p MasterProcess) (master.Summary, error) {
	// The name is settled before the first connection, which carries it
	// in application_name (so fleet:masters can count the connections of
	// this master and of its workers, whose names start with it).
	if err := checkNameEnv(p.Config, p.getenv); err != nil {
		return master.Summary{}, err
	}
	p.Name = cmp.Or(p.Name, MasterName(p.Config, p.getenv), master.DefaultName())
	p, err := fitMaster(ctx, p, masterAppName(p.Name))
	if err != nil {
		return master.Summary{}, err
	}
	mp, err := newMasterProcess(ctx, p)
	if err != nil {
		if p.pool != nil {
			ClosePool(p.pool) // safe twice: the pool service's stop may have closed it
		}
		return master.Summary{}, err
	}
	return mp.run(ctx)
}

// masterAppName is the application_name of a master's sessions.
func masterAppName(name string) string { return "fleet master " + name }

// masterProcess is a master process built and not started.
type masterProcess struct {
	services []lifecycle.Service
	master   *masterService
	sig      *lifecycle.Signal[string]
}

func newMasterProcess(ctx context.Context, p MasterProcess) (*masterProcess, error) {
	cfg := p.Config
	budget, err := p.budget(p.Supervisors)
	if err != nil {
		return nil, err
	}
	db, err := DatabaseOf(cfg)
	if err != nil {
		return nil, err
	}
	p.Name = cmp.Or(p.Name, MasterName(cfg, p.getenv), master.DefaultName())
	appName := masterAppName(p.Name)
	log := p.Logger
	pool := p.pool
	if pool == nil {
		if pool, err = NewPool(ctx, db, budget.Master, appName); err != nil {
			return nil, err
		}
	}
	mp := &masterProcess{sig: p.lifecycle}
	mp.services = append(mp.services, &part{
		name: "pool",
		start: func(ctx context.Context) error {
			if err := PingPool(ctx, db, pool); err != nil {
				return err
			}
			log.Info("database pooler", "logger", "fleet", "pooler", db.Pooler,
				"workers_wake_up", db.Wakeups(time.Duration(cfg.Queue.PollIntervalMs)*time.Millisecond))
			db.CheckDirect(ctx, appName, log)
			return nil
		},
		stop: func() { ClosePool(pool) },
	})
	// What was built is released by the services' stops, safe before their
	// starts.
	fail := func(err error) (*masterProcess, error) {
		lifecycle.StopAll(mp.services, nil)
		return nil, err
	}

	sp := p.Spawner
	if sp == nil {
		psp, err := spawner.NewProcessSpawner(p.Children)
		if err != nil {
			return fail(err)
		}
		db.ChildEnv(psp)
		if p.ConfigFile != "" {
			// Children load configuration the normal way; make sure they
			// find the same file whatever their working directory.
			abs := p.ConfigFile
			if !filepath.IsAbs(abs) {
				if abs, err = filepath.Abs(filepath.Join(p.Children.Dir, abs)); err != nil {
					return fail(fmt.Errorf("--config %s: %w", p.ConfigFile, err))
				}
			}
			psp.Env("APP_CONFIG", abs)
		}
		sp = psp
	}
	st := store.New(pool)
	m, settings, err := BuildMaster(st, p.Supervisors, sp, p.MasterOptions)
	if err != nil {
		return fail(err)
	}

	if addr := cfg.Fleet.HTTP.Addr; addr != "" {
		var dash *dashboard.Handler
		if cfg.Fleet.Dashboard {
			pc := pool.Config().Copy()
			pc.MaxConns, pc.MinConns = int32(max(settings.Connections.Dashboard, 1)), 0
			dashPool, err := pgxpool.NewWithConfig(ctx, pc)
			if err != nil {
				return fail(fmt.Errorf("open the dashboard's database pool: %w", err))
			}
			mp.services = append(mp.services, &part{name: "dashboard", stop: func() { ClosePool(dashPool) }})
			svcOpts := fleet.ConfigOptions(cfg)
			svcOpts.Periodic = settings.Periodic
			dash = dashboard.New(fleet.New(dashPool, svcOpts), dashboard.Options{Path: cfg.Fleet.Path, Logger: settings.Logger})
		}
		col := metrics.NewCollector(st.Pool(), metrics.Options{
			Beat: m.Membership(), Logger: settings.Logger, Master: m.Name(), Instance: m.Instance(),
			Version: settings.Version, LongWait: cfg.Fleet.LongWait, HeldAfter: settings.HeldWarn,
		})
		srv := newHTTPServer(addr, httpMux(col, m.Readiness, dash), settings.Logger)
		var served bool // set by the HTTP server's start, read by the metrics' stop
		var base context.Context
		mp.services = append(mp.services, &part{
			name:  "metrics",
			start: func(ctx context.Context) error { base = ctx; return nil },
			stop: func() {
				if !served {
					return
				}
				// Hand the fleet-wide families over to another master now
				// rather than when the lease runs out.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(base), 2*time.Second)
				defer cancel()
				if err := col.Release(rctx); err != nil {
					settings.Logger.Warn("release the metrics exporter lease", "logger", "fleet", "err", err)
				}
			},
		}, &part{
			name: "http server",
			start: func(ctx context.Context) error {
				if err := srv.Start(ctx); err != nil {
					// A second master on the host (the default address
					// taken) still supervises its workers; only its probes
					// and gauges are missing.
					settings.Logger.Warn("the master runs without its HTTP listener (/metrics, /healthz, /readyz, the dashboard)", "logger", "fleet", "err", err)
					return nil
				}
				served = true
				if p.Serving != nil {
					path := ""
					if dash != nil {
						path = dash.Path()
					}
					p.Serving(addr, path)
				}
				return nil
			},
			stop: srv.Stop,
		})
	}
	mp.master = &masterService{m: m, settings: settings, running: p.Running, stopped: p.Stopped, done: make(chan struct{})}
	mp.services = append(mp.services, mp.master)
	return mp, nil
}

// run starts the services in order, waits for ctx to end or the master to
// end by itself, and stops them in the reverse.
func (mp *masterProcess) run(ctx context.Context) (master.Summary, error) {
	if _, err := lifecycle.StartAll(ctx, mp.services, mp.sig); err != nil {
		lifecycle.StopAll(mp.services, mp.sig)
		return master.Summary{}, err
	}
	select {
	case <-ctx.Done():
	case <-mp.master.done:
	}
	lifecycle.StopAll(mp.services, mp.sig)
	return mp.master.sum, mp.master.err
}

// part is a service of the master process made of a start and a stop:
// the stop runs once, whether or not the start ran or failed (it releases
// what was built for the service), and a second Stop waits for the first.
type part struct {
	name  string
	start func(context.Context) error // nil: nothing to start
	stop  func()                      // nil: nothing to stop

	mu               sync.Mutex
	started, stopped bool
}

func (s *part) Name() string { return s.name }

func (s *part) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return fmt.Errorf("%s: %w", s.name, lifecycle.ErrStopped)
	case s.started:
		return fmt.Errorf("%s: %w", s.name, lifecycle.ErrStarted)
	}
	s.started = true
	if s.start == nil {
		return nil
	}
	return s.start(ctx)
}

func (s *part) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if s.stop != nil {
		s.stop()
	}
}

// masterService runs a master.Master as the last service of the process:
// its start starts Run, its stop ends Run's context and waits for it.
type masterService struct {
	m        *master.Master
	settings master.Settings
	running  func(*master.Master, master.Settings)
	stopped  func(master.Summary)

	life lifecycle.Lifecycle
	done chan struct{} // closed when Run has returned
	sum  master.Summary
	err  error
}

func (s *masterService) Name() string { return "master" }

func (s *masterService) Start(ctx context.Context) error {
	rctx, end, err := s.life.Begin(ctx, s.Name())
	if err != nil {
		return err
	}
	if s.running != nil {
		s.running(s.m, s.settings)
	}
	go func() {
		defer end()
		s.sum, s.err = s.m.Run(rctx)
		close(s.done)
		if s.stopped != nil {
			s.stopped(s.sum)
		}
	}()
	return nil
}

func (s *masterService) Stop() { s.life.Halt() }
