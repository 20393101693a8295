package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/master"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/supervisor"
)

// A connection refused for want of a slot after the first one is
// explained as the first one is, and is ErrUnreachable (exit 4); other
// errors, and those explained already, pass unchanged.
func TestExplainRefused(t *testing.T) {
	refused := fmt.Errorf("count jobs: %w", &pgconn.ConnectError{})
	if ExplainRefused(refused) != refused {
		t.Error("an error without SQLSTATE 53300 changed")
	}
	for msg, want := range map[string]string{
		"sorry, too many clients already":                                                "every slot of the server's max_connections is taken",
		"remaining connection slots are reserved for roles with the SUPERUSER attribute": "the slots left are reserved for privileged roles",
		`too many connections for role "app"`:                                            "the role's connection limit is reached",
		`too many connections for database "app"`:                                        "the database's connection limit is reached",
		"trop de clients": "the server's max_connections, or the role's or the database's connection limit, is reached",
	} {
		err := fmt.Errorf("count jobs: %w", &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: msg})
		got := ExplainRefused(err)
		if !errors.Is(got, ErrUnreachable) || !strings.HasPrefix(got.Error(), "the database refused a connection: too many connections ("+want) ||
			!strings.Contains(got.Error(), "SQLSTATE 53300: "+msg) || !strings.Contains(got.Error(), "database.reserve_connections") {
			t.Errorf("%q: %v", msg, got)
		}
		if again := ExplainRefused(got); again != got {
			t.Errorf("%q: explained twice: %v", msg, again)
		}
	}
}

// ReadServer reads the server's settings and counts the sessions of every
// role and database but its own, also for a role that is no superuser.
func TestReadServer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var maxConns, reserved int
	if err := admin.QueryRow(ctx, `SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int
		+ COALESCE(current_setting('reserved_connections', true)::int, 0)`).Scan(&maxConns, &reserved); err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("fleet_reader_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		_, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	cc, err := pgx.ParseConfig(pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cc.User = role
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	cfg := config.Default()
	for _, reserve := range []*int{nil, new(int)} {
		cfg.Database.ReserveConnections = reserve
		srv, err := ReadServer(ctx, conn, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		wantReserve := max(3, maxConns/10)
		if reserve != nil {
			wantReserve = 0
		}
		// The admin's session is open, the reader's own is not counted.
		if srv.MaxConnections != maxConns || srv.Reserved != reserved || srv.InUse < 1 || srv.InUse >= maxConns || srv.Reserve != wantReserve {
			t.Errorf("reserve %v: %+v, want max_connections %d, %d reserved, a reserve of %d and the admin's session in use", reserve, srv, maxConns, reserved, wantReserve)
		}
	}
}

// A worker whose pool the server has no room for shrinks it to one
// connection (beside its listener), saying so with the numbers and the
// key; with room it keeps its size; behind a pooler nothing is read.
func TestFitWorkerPool(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	cfg := config.Default()
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	d := Database{URL: "unused", Pooler: config.PoolerNone}
	none := 0
	cfg.Database.ReserveConnections = &none
	if n := fitWorkerPool(t.Context(), pool, d, &cfg, 3, log); n != 3 || logs.String() != "" {
		t.Errorf("with room: pool %d, log %q; want 3 and nothing", n, logs.String())
	}
	all := 100000
	cfg.Database.ReserveConnections = &all
	if n := fitWorkerPool(t.Context(), pool, Database{URL: "unused", Pooler: config.PoolerTransaction}, &cfg, 3, log); n != 3 || logs.String() != "" {
		t.Errorf("behind a pooler: pool %d, log %q; want 3 and nothing", n, logs.String())
	}
	if n := fitWorkerPool(t.Context(), pool, d, &cfg, 3, log); n != 1 {
		t.Errorf("without room: pool %d, want 1", n)
	}
	for _, want := range []string{"this worker's pool shrinks from 3 to 1", "kept free (database.reserve_connections)",
		"taken from the 100000 kept free for the application", "max_connections="} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
}

// A master whose configuration the server has no room for runs anyway,
// with fewer processes of the smallest pools, and warns naming the
// numbers and the key; its workers are started with a pool of one.
func TestMasterFitsTheServer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []string
	var logs syncbuf.Buffer
	p, fake := testMasterProcess(t, pgtest.URL(t), "", &calls, &mu)
	p.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	all := 100000
	p.Config.Database.ReserveConnections = &all
	got := make(chan master.Settings, 1)
	p.Running = func(_ *master.Master, s master.Settings) { got <- s }
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := RunMaster(ctx, p)
		done <- err
	}()
	var settings master.Settings
	select {
	case settings = <-got:
	case err := <-done:
		t.Fatalf("RunMaster: %v", err)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	if err := fake.WaitRunning(wctx, 1); err != nil {
		t.Fatalf("children: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunMaster: %v", err)
	}
	b := settings.Connections
	if b.Server == nil || b.Server.Reserve != all || b.Processes != 1 || b.Worker != supervisor.MinWorkerConnections ||
		b.Master != supervisor.MinMasterConnections || b.Total != b.Master+b.Worker {
		t.Errorf("budget %+v (server %+v), want one process of the smallest pools", b, b.Server)
	}
	if specs := fake.Specs(); len(specs) == 0 || specs[0].MaxConns != 1 {
		t.Errorf("workers started with %+v, want a pool of 1", specs)
	}
	for _, want := range []string{"level=WARN", "the fleet's connections do not fit in what the server has free",
		"kept free (database.reserve_connections)", "max_processes of supervisor default 1 of 4", "taken from the 100000 kept free"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
}
