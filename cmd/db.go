package cmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
)

// errUnreachable marks an openPool that failed because the server did not
// answer (or refused), as opposed to a bad connection string. Every
// connectError is one (errors.Is).
var errUnreachable = errors.New("the server does not answer")

// connectError is a failed first connection: the URL (without its
// password) and what went wrong, in PostgreSQL's words when it answered.
type connectError struct {
	url    string // redacted
	reason string
	err    error
}

func (e *connectError) Error() string {
	return fmt.Sprintf("cannot reach database %s: %s", e.url, e.reason)
}
func (e *connectError) Unwrap() error        { return e.err }
func (e *connectError) Is(target error) bool { return target == errUnreachable }

// newConnectError explains err, the failure of a first connection to url
// (the value of the configuration key key) as user to database db. A server that answered with an error gets its
// SQLSTATE and message, and a hint for the usual causes; one that did not
// answer is errUnreachable's "the server does not answer". The password
// is never part of it: PostgreSQL's messages do not carry it and the URL
// is redacted.
func newConnectError(key, url, user, db string, err error) error {
	e := &connectError{url: config.RedactURL(url), err: err}
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		e.reason = fmt.Sprintf("%s: %s", errUnreachable, err)
		return e
	}
	said := fmt.Sprintf("SQLSTATE %s: %s", pg.Code, pg.Message)
	if pg.Detail != "" {
		said += " (" + pg.Detail + ")"
	}
	switch pg.Code {
	case "53300": // too_many_connections
		e.reason = fmt.Sprintf("the server has no connection left (%s): raise its max_connections or the role's connection limit, cap the fleet with fleet.max_connections or lower database.max_conns, or put a pooler in front", said)
	case "08P01": // protocol_violation
		e.reason = fmt.Sprintf("the server, or a pooler in front of it, rejected the connection's startup (%s); fleet sends no startup parameter but application_name, so a pooler refusing one refuses a parameter of %s itself (remove it from the URL, or list it in PgBouncer's ignore_startup_parameters)", said, key)
	case "28P01", "28000": // invalid_password, invalid_authorization_specification
		e.reason = fmt.Sprintf("authentication failed for user %q (%s): check the user and password of %s and the server's pg_hba.conf", user, said, key)
	case "3D000": // invalid_catalog_name
		e.reason = fmt.Sprintf("database %q does not exist (%s): create it, or fix %s", db, said, key)
	default:
		e.reason = fmt.Sprintf("the server refused the connection (%s)", said)
	}
	return e
}

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

// explainDatabaseError turns an error caused by a missing fleet table,
// column or function into one that says to run `app migrate`, keeping
// PostgreSQL's message after it. Every command's error passes through it;
// fleetCommand says whether the command that failed is one of fleet's own
// (not one of cmd.App.Commands). An error about the app's own schema
// reaches the user as PostgreSQL said it (see missingFleetObject).
func explainDatabaseError(err error, fleetCommand bool) error {
	var pg *pgconn.PgError
	if err == nil || !errors.As(err, &pg) || !notMigratedCodes[pg.Code] || !missingFleetObject(pg, fleetCommand) {
		return err
	}
	return fmt.Errorf("%w (%s)", errNotMigrated, err.Error())
}

// missingFleetObject reports whether an undefined-object error is about
// fleet's own schema. Every object fleet's migrations create (tables and
// their partitions, the migrations tables queue_schema_migrations and
// fleet_schema_migrations, functions, sequences) is named queue_* or
// fleet_*: an error whose message names one is fleet's, whoever ran the
// statement. A missing relation is named in every message (in any
// lc_messages language), so one that names none of fleet's is the app's
// own table. A missing column, function or type is often named without
// its table ("column \"x\" does not exist"); such an error is fleet's when
// it comes from one of fleet's commands, which run only fleet's
// statements, and the app's when it comes from one of the app's.
//
// An app that names its own tables queue_* or fleet_* shares fleet's
// namespace and gets "not migrated" for them too.
func missingFleetObject(pg *pgconn.PgError, fleetCommand bool) bool {
	if isFleetName(pg.TableName) {
		return true
	}
	for _, w := range identifierRE.FindAllString(pg.Message, -1) {
		if isFleetName(w) {
			return true
		}
	}
	if pg.Code == "42P01" {
		return false
	}
	return fleetCommand
}

// identifierRE matches the words of a PostgreSQL message that may be
// identifiers, quoted or not, schema-qualified or not.
var identifierRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_$]*`)

// isFleetName reports whether an unqualified, unquoted name is one fleet's
// migrations use.
func isFleetName(name string) bool {
	name = strings.ToLower(name)
	return strings.HasPrefix(name, "queue_") || strings.HasPrefix(name, "fleet_")
}

// database is where fleet's connections go, from the [database] section:
// the URL, what it goes through (database.pooler), and the direct URL
// beside it.
type database struct {
	url       string
	directURL string // "" when not configured
	pooler    string // config.PoolerNone, PoolerSession or PoolerTransaction
}

// databaseOf returns the configured database, or a clear error when
// database.url is missing or database.direct_url is not a connection
// string.
func databaseOf(cfg *config.Config) (database, error) {
	if cfg.Database.URL == "" {
		return database{}, errNoDatabase
	}
	d := database{url: cfg.Database.URL, directURL: cfg.Database.DirectURL, pooler: cmp.Or(cfg.Database.Pooler, config.PoolerNone)}
	if d.directURL != "" {
		if _, err := d.directConfig(""); err != nil {
			return database{}, err
		}
	}
	return d, nil
}

// transaction reports whether the URL goes through a transaction pooler:
// a session lasts one transaction.
func (d database) transaction() bool { return d.pooler == config.PoolerTransaction }

// direct returns the database reached through database.direct_url, as
// PostgreSQL itself; ok is false when none is configured.
func (d database) direct() (_ database, ok bool) {
	if d.directURL == "" {
		return database{}, false
	}
	return database{url: d.directURL, directURL: d.directURL, pooler: config.PoolerNone}, true
}

// migrationTarget is where app migrate connects: database.direct_url when
// it is set, else database.url unless that goes through a transaction
// pooler. golang-migrate and fleet hold session advisory locks across
// statements and prepare statements, which a transaction pooler would
// hand to other clients halfway.
func (d database) migrationTarget() (database, error) {
	if direct, ok := d.direct(); ok {
		return direct, nil
	}
	if d.transaction() {
		return database{}, fmt.Errorf("app migrate cannot run through a transaction pooler (database.pooler = %q): "+
			"set database.direct_url to a connection that bypasses it", d.pooler)
	}
	return d, nil
}

// wakeups says how a worker on d learns of new jobs, for the start-up log
// lines: "LISTEN on database.direct_url", "LISTEN" or "polled every 1s".
func (d database) wakeups(poll time.Duration) string {
	switch {
	case d.directURL != "":
		return "LISTEN on database.direct_url"
	case d.transaction():
		return "polled every " + poll.String() + " (database.pooler = \"transaction\" and no database.direct_url to LISTEN on)"
	}
	return "LISTEN"
}

// listenStore returns st set to LISTEN where d says: on database.direct_url
// when set (with the application name of st's pool), not at all under a
// transaction pooler without it (the worker then polls), else on the
// pool's own settings.
func (d database) listenStore(st *store.Store) (*store.Store, error) {
	if d.directURL != "" {
		cc, err := d.directConfig(st.Pool().Config().ConnConfig.RuntimeParams["application_name"])
		if err != nil {
			return nil, err
		}
		return st.WithListen(cc), nil
	}
	if d.transaction() {
		return st.WithoutListen(), nil
	}
	return st, nil
}

// directConfig is the configuration of a connection to
// database.direct_url, named appName unless the URL names it.
func (d database) directConfig(appName string) (*pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(d.directURL)
	if err != nil {
		return nil, fmt.Errorf("database.direct_url %s is not a valid connection string", config.RedactURL(d.directURL))
	}
	if _, set := cc.RuntimeParams["application_name"]; !set && appName != "" {
		cc.RuntimeParams["application_name"] = appName
	}
	return cc, nil
}

// checkDirect connects once to database.direct_url, when one is set, and
// warns when it does not answer: the workers LISTEN there, and a worker
// that cannot keeps retrying quietly and polls meanwhile, so the master
// says it once as it starts.
func (d database) checkDirect(ctx context.Context, appName string, log *slog.Logger) {
	direct, ok := d.direct()
	if !ok {
		return
	}
	cc, err := d.directConfig(appName)
	if err != nil {
		log.Warn("workers poll for jobs", "logger", "fleet", "err", err)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cc)
	if err != nil {
		log.Warn("database.direct_url cannot be reached: workers poll for jobs until it can", "logger", "fleet",
			"err", newConnectError(direct.key(), direct.url, cc.User, cc.Database, err))
		return
	}
	_ = conn.Close(context.WithoutCancel(ctx))
}

// childEnv hands d (its URL, pooler and direct URL) to the fleet:work
// children sp starts, as APP_DATABASE__URL, APP_DATABASE__POOLER and
// APP_DATABASE__DIRECT_URL, so that a child connects the way its master
// does whatever its own configuration sources hold. They go by
// environment, never by flag: a command line is there for anyone to read
// in ps, and the URLs may hold passwords.
func (d database) childEnv(sp *spawner.ProcessSpawner) {
	sp.Env("APP_DATABASE__URL", d.url)
	sp.Env("APP_DATABASE__POOLER", d.pooler)
	sp.Env("APP_DATABASE__DIRECT_URL", d.directURL)
}

// openPool connects to the database and checks the connection, so an
// unreachable database is one clear error up front. The URL's password
// never appears.
//
// It sends no startup parameter but application_name (which PgBouncer
// accepts as it is): a stock pooler refuses every other one. PostgreSQL's
// JIT compiler, which kicks in on cost estimates (the JSON functions over
// fleet_masters estimate high) and would spend 100 ms compiling a 1 ms
// statement, is turned off with a SET as each session opens, except
// through a transaction pooler: a SET there would stay behind on a server
// connection other clients get next. There the statements whose estimate
// can reach jit_above_cost turn it off for their own transaction (see
// store/jit.go), as they do everywhere; every other statement of fleet's
// estimates far below it, and runs with the server's setting.
//
// Through a transaction pooler (d.pooler "transaction") statements run
// without server-side prepared statements: each is parsed, bound and run
// on the unnamed statement in one round trip (pgx's exec mode, unless the
// URL asks for simple_protocol), since a named one would outlive the
// transaction on a server connection shared with others.
func openPool(ctx context.Context, d database, maxConns int, appName string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, fmt.Errorf("%s %s is not a valid connection string", d.key(), config.RedactURL(d.url))
	}
	// Every session says which process of the fleet holds it (in
	// pg_stat_activity and the server's logs), unless the URL names one
	// itself. PostgreSQL keeps the first 63 bytes.
	if _, set := pc.ConnConfig.RuntimeParams["application_name"]; !set && appName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = appName
	}
	if maxConns > 0 {
		pc.MaxConns = int32(maxConns)
	}
	pc.MinConns = 0
	if d.transaction() {
		if m := pc.ConnConfig.DefaultQueryExecMode; m != pgx.QueryExecModeExec && m != pgx.QueryExecModeSimpleProtocol {
			pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		}
		pc.ConnConfig.StatementCacheCapacity, pc.ConnConfig.DescriptionCacheCapacity = 0, 0
	} else {
		pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, "SET jit = off"); err != nil {
				return fmt.Errorf("turn JIT off for the session: %w", err)
			}
			return nil
		}
	}
	// pgxpool pings a connection that sat idle for over a second before
	// handing it out; an idle worker polling every second would then pay
	// two round trips per poll. A dead connection shows itself on its
	// statement instead, which fleet retries.
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > 30*time.Second }
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", config.RedactURL(d.url), err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, newConnectError(d.key(), d.url, pc.ConnConfig.User, pc.ConnConfig.Database, err)
	}
	return pool, nil
}

// key names the configuration key d's URL comes from.
func (d database) key() string {
	if d.url != "" && d.url == d.directURL {
		return "database.direct_url"
	}
	return "database.url"
}

// hostPID is host:pid, how a session names its process when it has no
// name of its own.
func hostPID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}
