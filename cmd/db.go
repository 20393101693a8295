package cmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/config"
)

// errUnreachable marks an openPool that failed because the server did not
// answer (or refused), as opposed to a bad connection string.
var errUnreachable = errors.New("the server does not answer")

// errNoDatabase explains what to do when database.url is missing.
var errNoDatabase = errors.New("database.url is not set: set it in config/app.toml or APP_DATABASE__URL (or run 'app demo', which starts a private database)")

// notMigratedCodes are the SQLSTATEs a statement gets from a database that
// lacks fleet's tables, columns or functions: never migrated, or migrated
// by an older release.
var notMigratedCodes = map[string]bool{
	"42P01": true, // undefined_table
	"42703": true, // undefined_column
	"42883": true, // undefined_function
	"42704": true, // undefined_object (a sequence, a type)
}

// errNotMigrated explains a database without fleet's schema.
var errNotMigrated = errors.New("the database is not migrated (or only partly): run `app migrate`")

// explainDatabaseError turns an error caused by a missing table, column or
// function into one that says to run `app migrate`, keeping PostgreSQL's
// message after it. Every command's error passes through it.
func explainDatabaseError(err error) error {
	var pg *pgconn.PgError
	if err == nil || !errors.As(err, &pg) || !notMigratedCodes[pg.Code] {
		return err
	}
	return &exitError{code: 1, err: fmt.Errorf("%w (%s)", errNotMigrated, err.Error())}
}

// databaseURL returns the configured URL or a clear error.
func databaseURL(cfg *config.Config) (string, error) {
	if cfg.Database.URL == "" {
		return "", errNoDatabase
	}
	return cfg.Database.URL, nil
}

// openPool connects to url and checks the connection, so an unreachable
// database is one clear error up front. The URL's password never appears.
func openPool(ctx context.Context, url string, maxConns int) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database.url %s is not a valid connection string", config.RedactURL(url))
	}
	if maxConns > 0 {
		pc.MaxConns = int32(maxConns)
	}
	pc.MinConns = 0
	// fleet runs short statements; PostgreSQL's JIT compiler, which kicks in
	// on cost estimates (the JSON functions over fleet_masters estimate
	// high), would spend 100 ms compiling a 1 ms query.
	pc.ConnConfig.RuntimeParams["jit"] = "off"
	// pgxpool pings a connection that sat idle for over a second before
	// handing it out; an idle worker polling every second would then pay
	// two round trips per poll. A dead connection shows itself on its
	// statement instead, which fleet retries.
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > 30*time.Second }
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", config.RedactURL(url), err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach database %s: %w: %w", config.RedactURL(url), errUnreachable, err)
	}
	return pool, nil
}
