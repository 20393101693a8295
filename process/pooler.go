package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/store"
)

// The pooler policy: how a process of the fleet connects to the database
// the [database] section describes (database.url, through the pooler
// database.pooler names, and database.direct_url beside it), and how it
// hands that on to the workers it starts.

// ErrNoDatabase explains what to do when database.url is missing.
var ErrNoDatabase = errors.New("database.url is not set: set it in config/app.toml or APP_DATABASE__URL (or run 'app demo', which starts a private database)")

// ErrUnreachable marks an OpenPool that failed because the server did not
// answer (or refused), as opposed to a bad connection string. Every
// connectError is one (errors.Is).
var ErrUnreachable = errors.New("the server does not answer")

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
func (e *connectError) Is(target error) bool { return target == ErrUnreachable }

// newConnectError explains err, the failure of a first connection to url
// (the value of the configuration key key) as user to database db. A server that answered with an error gets its
// SQLSTATE and message, and a hint for the usual causes; one that did not
// answer is ErrUnreachable's "the server does not answer". The password
// is never part of it: PostgreSQL's messages do not carry it and the URL
// is redacted.
func newConnectError(key, url, user, db string, err error) error {
	e := &connectError{url: config.RedactURL(url), err: err}
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		e.reason = fmt.Sprintf("%s: %s", ErrUnreachable, err)
		return e
	}
	said := fmt.Sprintf("SQLSTATE %s: %s", pg.Code, pg.Message)
	if pg.Detail != "" {
		said += " (" + pg.Detail + ")"
	}
	switch pg.Code {
	case "53300": // too_many_connections
		e.reason = tooManyConnections(pg)
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

// tooManyConnections explains a connection the server refused for want
// of a free slot (SQLSTATE 53300): which limit it met, when its message
// (in English) says so, and what to do.
func tooManyConnections(pg *pgconn.PgError) string {
	which := "the server's max_connections, or the role's or the database's connection limit, is reached"
	switch m := pg.Message; {
	case strings.Contains(m, "too many clients already"):
		which = "every slot of the server's max_connections is taken"
	case strings.Contains(m, "reserved"):
		which = "the slots left are reserved for privileged roles (superuser_reserved_connections, reserved_connections)"
	case strings.Contains(m, "for role"):
		which = "the role's connection limit is reached"
	case strings.Contains(m, "for database"):
		which = "the database's connection limit is reached"
	}
	return fmt.Sprintf("the database refused a connection: too many connections (%s; SQLSTATE 53300: %s): "+
		"raise max_connections or the connection limit, leave more free for the application with database.reserve_connections "+
		"or fleet.max_connections, or put a pooler in front", which, pg.Message)
}

// refusedError is a connection refused with SQLSTATE 53300 after a
// command's first one (a pool opening a second): the same explanation as
// a first connection's, and ErrUnreachable too.
type refusedError struct {
	reason string
	err    error
}

func (e *refusedError) Error() string        { return e.reason }
func (e *refusedError) Unwrap() error        { return e.err }
func (e *refusedError) Is(target error) bool { return target == ErrUnreachable }

// ExplainRefused returns err explained when a connection it holds was
// refused for want of a free slot (SQLSTATE 53300, see
// tooManyConnections), and err itself otherwise or when it is explained
// already (a first connection's connectError).
func ExplainRefused(err error) error {
	var pg *pgconn.PgError
	if err == nil || !errors.As(err, &pg) || pg.Code != "53300" || errors.Is(err, ErrUnreachable) {
		return err
	}
	return &refusedError{reason: tooManyConnections(pg), err: err}
}

// Database is where fleet's connections go, from the [database] section:
// the URL, what it goes through (database.pooler), and the direct URL
// beside it.
type Database struct {
	URL       string
	DirectURL string // "" when not configured
	Pooler    string // config.PoolerNone, PoolerSession or PoolerTransaction
}

// DatabaseOf returns the configured Database, or a clear error when
// database.url is missing or database.direct_url is not a connection
// string.
func DatabaseOf(cfg *config.Config) (Database, error) {
	if cfg.Database.URL == "" {
		return Database{}, ErrNoDatabase
	}
	d := Database{URL: cfg.Database.URL, DirectURL: cfg.Database.DirectURL, Pooler: cmp.Or(cfg.Database.Pooler, config.PoolerNone)}
	if d.DirectURL != "" {
		if _, err := d.directConfig(""); err != nil {
			return Database{}, err
		}
	}
	return d, nil
}

// Transaction reports whether the URL goes through a transaction pooler:
// a session lasts one transaction.
func (d Database) Transaction() bool { return d.Pooler == config.PoolerTransaction }

// Direct returns the database reached through database.direct_url, as
// PostgreSQL itself; ok is false when none is configured.
func (d Database) Direct() (_ Database, ok bool) {
	if d.DirectURL == "" {
		return Database{}, false
	}
	return Database{URL: d.DirectURL, DirectURL: d.DirectURL, Pooler: config.PoolerNone}, true
}

// MigrationTarget is where app migrate connects: database.direct_url when
// it is set, else database.url unless that goes through a transaction
// pooler. golang-migrate and fleet hold session advisory locks across
// statements and prepare statements, which a transaction pooler would
// hand to other clients halfway.
func (d Database) MigrationTarget() (Database, error) {
	if direct, ok := d.Direct(); ok {
		return direct, nil
	}
	if d.Transaction() {
		return Database{}, fmt.Errorf("app migrate cannot run through a transaction pooler (database.pooler = %q): "+
			"set database.direct_url to a connection that bypasses it", d.Pooler)
	}
	return d, nil
}

// Wakeups says how a worker on d learns of new jobs, for the start-up log
// lines: "LISTEN on database.direct_url", "LISTEN" or "polled every 1s".
func (d Database) Wakeups(poll time.Duration) string {
	switch {
	case d.DirectURL != "":
		return "LISTEN on database.direct_url"
	case d.Transaction():
		return "polled every " + poll.String() + " (database.pooler = \"transaction\" and no database.direct_url to LISTEN on)"
	}
	return "LISTEN"
}

// ListenStore returns st set to LISTEN where d says: on database.direct_url
// when set (with the application name of st's pool), not at all under a
// transaction pooler without it (the worker then polls), else on the
// pool's own settings.
func (d Database) ListenStore(st *store.Store) (*store.Store, error) {
	if d.DirectURL != "" {
		cc, err := d.directConfig(st.Pool().Config().ConnConfig.RuntimeParams["application_name"])
		if err != nil {
			return nil, err
		}
		return st.WithListen(cc), nil
	}
	if d.Transaction() {
		return st.WithoutListen(), nil
	}
	return st, nil
}

// directConfig is the configuration of a connection to
// database.direct_url, named appName unless the URL names it.
func (d Database) directConfig(appName string) (*pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(d.DirectURL)
	if err != nil {
		return nil, fmt.Errorf("database.direct_url %s is not a valid connection string", config.RedactURL(d.DirectURL))
	}
	if _, set := cc.RuntimeParams["application_name"]; !set && appName != "" {
		cc.RuntimeParams["application_name"] = appName
	}
	return cc, nil
}

// CheckDirect connects once to database.direct_url, when one is set, and
// warns when it does not answer: the workers LISTEN there, and a worker
// that cannot keeps retrying quietly and polls meanwhile, so the master
// says it once as it starts.
func (d Database) CheckDirect(ctx context.Context, appName string, log *slog.Logger) {
	direct, ok := d.Direct()
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
			"err", newConnectError(direct.Key(), direct.URL, cc.User, cc.Database, err))
		return
	}
	_ = conn.Close(context.WithoutCancel(ctx))
}

// ChildEnv hands d (its URL, pooler and direct URL) to the fleet:work
// children sp starts, as APP_DATABASE__URL, APP_DATABASE__POOLER and
// APP_DATABASE__DIRECT_URL, so that a child connects the way its master
// does whatever its own configuration sources hold. They go by
// environment, never by flag: a command line is there for anyone to read
// in ps, and the URLs may hold passwords.
func (d Database) ChildEnv(sp *spawner.ProcessSpawner) {
	sp.Env("APP_DATABASE__URL", d.URL)
	sp.Env("APP_DATABASE__POOLER", d.Pooler)
	sp.Env("APP_DATABASE__DIRECT_URL", d.DirectURL)
}

// OpenPool connects to the database and checks the connection, so an
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
// Through a transaction pooler (d.Pooler "transaction") statements run
// without server-side prepared statements: each is parsed, bound and run
// on the unnamed statement in one round trip (pgx's exec mode, unless the
// URL asks for simple_protocol), since a named one would outlive the
// transaction on a server connection shared with others.
func OpenPool(ctx context.Context, d Database, maxConns int, appName string) (*pgxpool.Pool, error) {
	pool, err := NewPool(ctx, d, maxConns, appName)
	if err != nil {
		return nil, err
	}
	if err := PingPool(ctx, d, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// NewPool is OpenPool's pool before its first connection: pgxpool connects
// lazily, so it connects to nothing, and fails only on a bad connection
// string. PingPool checks it.
func NewPool(ctx context.Context, d Database, maxConns int, appName string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		return nil, fmt.Errorf("%s %s is not a valid connection string", d.Key(), config.RedactURL(d.URL))
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
	if d.Transaction() {
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
		return nil, fmt.Errorf("open database %s: %w", config.RedactURL(d.URL), err)
	}
	return pool, nil
}

// PingPool checks that pool, of NewPool over d, reaches the database
// within 10 s; when it does not, the error says why (a connectError, which
// is ErrUnreachable).
func PingPool(ctx context.Context, d Database, pool *pgxpool.Pool) error {
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		cc := pool.Config().ConnConfig
		return newConnectError(d.Key(), d.URL, cc.User, cc.Database, err)
	}
	return nil
}

// Key names the configuration key d's URL comes from.
func (d Database) Key() string {
	if d.URL != "" && d.URL == d.DirectURL {
		return "database.direct_url"
	}
	return "database.url"
}

// HostPID is host:pid, how a session names its process when it has no
// name of its own.
func HostPID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// poolCloseWait bounds how long a stopping process waits for its pool to
// close. A connection whose statement was cut off is closed by pgx with a
// cancel request to the server, and pgxpool.Close waits for that, up to
// 15 s: on a frozen server, that would add 15 s to every stop.
const poolCloseWait = time.Second

// ClosePool closes pool, waiting at most poolCloseWait. It is the last
// thing a command does before its process exits; a close still waiting
// then ends with the process, which closes every socket.
func ClosePool(pool *pgxpool.Pool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pool.Close()
	}()
	select {
	case <-done:
	case <-time.After(poolCloseWait):
	}
}
