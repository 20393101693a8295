package process

import (
	"context"
	"fmt"
	"log/slog"
	"time"

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

// fitMaster opens the master's pool, at the size the configuration asks
// for, and reads on its first connection what the server has room for
// (not behind a pooler, whose clients are not the server's:
// fleet.max_connections caps the fleet there). It fits p's supervisors and
// connection budget in that room (supervisor.FitServer), logging a
// warning that names the numbers and the keys when the configuration does
// not fit, and reopens the pool smaller when the fit shrinks it (the
// connection read on is closed then). p comes back with Budget set, and
// Supervisors lowered when the fleet runs fewer processes, and with the
// pool for newMasterProcess. A pool that cannot connect is the error,
// explained (ErrUnreachable); a server whose room cannot be read leaves a
// warning, and the fleet runs on its configured budget.
//
// The server is read through the master's own pool, not a connection of
// its own, so that a master starting cold sets up one connection fewer
// before its first worker starts.
func fitMaster(ctx context.Context, p MasterProcess, appName string) (MasterProcess, error) {
	cfg := p.Config
	opts := budgetOptions(cfg)
	configured, err := supervisor.ConnectionBudget(p.Supervisors, opts)
	if err != nil {
		return p, err // the configuration itself is wrong: before anything connects
	}
	db, err := DatabaseOf(cfg)
	if err != nil {
		return p, err
	}
	pool, err := OpenPool(ctx, db, configured.Master, appName)
	if err != nil {
		return p, err
	}
	p.pool = pool
	if db.Pooler != config.PoolerNone {
		return p, nil
	}
	srv, err := ReadServer(ctx, pool, cfg)
	if err != nil {
		p.Logger.Warn("cannot read the server's connection settings: the pools keep their configured sizes", "logger", "fleet", "err", err)
		return p, nil
	}
	sups, b, warning, err := supervisor.FitServer(p.Supervisors, opts, srv)
	if err != nil {
		ClosePool(pool)
		p.pool = nil
		return p, err
	}
	attrs := []any{"logger", "fleet", "max_connections", srv.MaxConnections, "reserved", srv.Reserved,
		"in_use", srv.InUse, "reserve", srv.Reserve, "room", srv.Room(), "budget", b.Total}
	if warning != "" {
		p.Logger.Warn("the fleet's connections do not fit in what the server has free: "+warning, attrs...)
	} else {
		p.Logger.Info("connection budget", attrs...)
	}
	if b.Master != configured.Master {
		ClosePool(pool)
		if p.pool, err = NewPool(ctx, db, b.Master, appName); err != nil {
			p.pool = nil
			return p, err
		}
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
