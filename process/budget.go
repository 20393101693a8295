package process

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// The connection budget against the server: as a master or a worker
// starts, it reads the server's max_connections, its reserved slots and
// the sessions open, and fits its pools in what is left once
// database.reserve_connections (by default a tenth of max_connections, at
// least 3) is kept free for the application (supervisor.FitServer).

// Reserve is the number of connections cfg keeps free for the
// application on a server of maxConnections: database.reserve_connections
// when set, else supervisor.DefaultReserve.
func Reserve(cfg *config.Config, maxConnections int) int {
	if r := cfg.Database.ReserveConnections; r != nil {
		return *r
	}
	return supervisor.DefaultReserve(maxConnections)
}

// ReadServer reads on q what the server has room for, with the reserve of
// cfg.
func ReadServer(ctx context.Context, q store.DBTX, cfg *config.Config) (supervisor.Server, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sc, err := store.ReadServerConnections(rctx, q)
	if err != nil {
		return supervisor.Server{}, err
	}
	return supervisor.Server{MaxConnections: sc.MaxConnections, Reserved: sc.Reserved, InUse: sc.InUse,
		Reserve: Reserve(cfg, sc.MaxConnections)}, nil
}

// probeServer connects once to d as appName and reads what the server has
// room for. ok is false when nothing was read: behind a pooler, whose
// clients are not the server's (fleet.max_connections caps the fleet
// there), or when the statement failed (a warning is logged, and the
// fleet runs on its configured budget). A connection that fails is the
// error, explained as OpenPool's first connection is (ErrUnreachable).
func probeServer(ctx context.Context, d Database, cfg *config.Config, appName string, log *slog.Logger) (_ supervisor.Server, ok bool, _ error) {
	if d.Pooler != config.PoolerNone {
		return supervisor.Server{}, false, nil
	}
	cc, err := pgx.ParseConfig(d.URL)
	if err != nil {
		return supervisor.Server{}, false, fmt.Errorf("%s %s is not a valid connection string", d.Key(), config.RedactURL(d.URL))
	}
	if _, set := cc.RuntimeParams["application_name"]; !set && appName != "" {
		cc.RuntimeParams["application_name"] = appName
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cc)
	if err != nil {
		return supervisor.Server{}, false, newConnectError(d.Key(), d.URL, cc.User, cc.Database, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	srv, err := ReadServer(ctx, conn, cfg)
	if err != nil {
		log.Warn("cannot read the server's connection settings: the pools keep their configured sizes", "logger", "fleet", "err", err)
		return supervisor.Server{}, false, nil
	}
	return srv, true, nil
}

// fitMaster reads the server's room (probeServer) and fits p's
// supervisors and connection budget in it (supervisor.FitServer), logging
// a warning that names the numbers and the keys when the configuration
// does not fit. p comes back with Budget set, and Supervisors lowered
// when the fleet runs fewer processes.
func fitMaster(ctx context.Context, p MasterProcess, appName string) (MasterProcess, error) {
	cfg := p.Config
	opts := budgetOptions(cfg)
	if _, err := supervisor.ConnectionBudget(p.Supervisors, opts); err != nil {
		return p, err // the configuration itself is wrong: before anything connects
	}
	db, err := DatabaseOf(cfg)
	if err != nil {
		return p, err
	}
	srv, ok, err := probeServer(ctx, db, cfg, appName, p.Logger)
	if err != nil || !ok {
		return p, err
	}
	sups, b, warning, err := supervisor.FitServer(p.Supervisors, opts, srv)
	if err != nil {
		return p, err
	}
	attrs := []any{"logger", "fleet", "max_connections", srv.MaxConnections, "reserved", srv.Reserved,
		"in_use", srv.InUse, "reserve", srv.Reserve, "room", srv.Room(), "budget", b.Total}
	if warning != "" {
		p.Logger.Warn("the fleet's connections do not fit in what the server has free: "+warning, attrs...)
	} else {
		p.Logger.Info("connection budget", attrs...)
	}
	p.Supervisors, p.Budget = sups, &b
	return p, nil
}

// fitWorkerPool is the pool size a worker that wants want connections in
// its pool (and one more for LISTEN) takes on pool's server: want when
// the server has room for them with database.reserve_connections kept
// free, else what room there is less the listener's, at least 1 (the
// least a worker works with: its listener and one pooled connection).
// It logs a warning naming the numbers and the key when it shrinks, and
// reads nothing behind a pooler.
func fitWorkerPool(ctx context.Context, pool store.DBTX, d Database, cfg *config.Config, want int, log *slog.Logger) int {
	if d.Pooler != config.PoolerNone {
		return want
	}
	srv, err := ReadServer(ctx, pool, cfg)
	if err != nil {
		log.Warn("cannot read the server's connection settings: the pool keeps its size", "err", err, "pool", want)
		return want
	}
	room := srv.Room()
	if room >= want+1 {
		return want
	}
	n := max(1, room-1)
	if n >= want {
		return want
	}
	msg := fmt.Sprintf("the server has room for %d connections (%s): this worker's pool shrinks from %d to %d, beside its LISTEN connection",
		room, srv, want, n)
	if n+1 > room {
		msg += fmt.Sprintf(", %d of them taken from the %d kept free for the application", n+1-max(room, 0), srv.Reserve)
	}
	log.Warn(msg+"; raise max_connections, or lower database.reserve_connections or the fleet's processes",
		"max_connections", srv.MaxConnections, "reserved", srv.Reserved, "in_use", srv.InUse, "reserve", srv.Reserve, "room", room, "pool", n)
	return n
}
