package cmd

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

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
