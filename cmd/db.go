package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/config"
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
// as user to database db. A server that answered with an error gets its
// SQLSTATE and message, and a hint for the usual causes; one that did not
// answer is errUnreachable's "the server does not answer". The password
// is never part of it: PostgreSQL's messages do not carry it and the URL
// is redacted.
func newConnectError(url, user, db string, err error) error {
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
		e.reason = fmt.Sprintf("the server, or a pooler in front of it, rejected the connection's startup (%s); a pooler may refuse the startup parameter jit that fleet sends (PgBouncer: add jit to ignore_startup_parameters)", said)
	case "28P01", "28000": // invalid_password, invalid_authorization_specification
		e.reason = fmt.Sprintf("authentication failed for user %q (%s): check the user and password of database.url and the server's pg_hba.conf", user, said)
	case "3D000": // invalid_catalog_name
		e.reason = fmt.Sprintf("database %q does not exist (%s): create it, or fix database.url", db, said)
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

// databaseURL returns the configured URL or a clear error.
func databaseURL(cfg *config.Config) (string, error) {
	if cfg.Database.URL == "" {
		return "", errNoDatabase
	}
	return cfg.Database.URL, nil
}

// openPool connects to url and checks the connection, so an unreachable
// database is one clear error up front. The URL's password never appears.
func openPool(ctx context.Context, url string, maxConns int, appName string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database.url %s is not a valid connection string", config.RedactURL(url))
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
		return nil, newConnectError(url, pc.ConnConfig.User, pc.ConnConfig.Database, err)
	}
	return pool, nil
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
