package cmd

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestExplainDatabaseErrorOnlyForFleetsSchema(t *testing.T) {
	cases := []struct {
		name         string
		pg           pgconn.PgError
		fleetCommand bool
		want         bool // "not migrated"
	}{
		{"fleet table from fleet", pgconn.PgError{Code: "42P01", Message: `relation "queue_jobs" does not exist`}, true, true},
		{"fleet table from the app", pgconn.PgError{Code: "42P01", Message: `relation "fleet_masters" does not exist`}, false, true},
		{"qualified fleet table", pgconn.PgError{Code: "42P01", Message: `relation "public.queue_limits" does not exist`}, false, true},
		{"migrations table", pgconn.PgError{Code: "42P01", Message: `relation "fleet_schema_migrations" does not exist`}, true, true},
		{"localized", pgconn.PgError{Code: "42P01", Message: `Relation »queue_unique_keys« existiert nicht`}, false, true},
		{"app table from the app", pgconn.PgError{Code: "42P01", Message: `relation "orders" does not exist`}, false, false},
		{"app table from fleet", pgconn.PgError{Code: "42P01", Message: `relation "orders" does not exist`}, true, false},
		{"fleet function", pgconn.PgError{Code: "42883", Message: `function fleet_partitions_ensure(timestamp with time zone, integer, integer) does not exist`}, false, true},
		{"column of a fleet relation", pgconn.PgError{Code: "42703", Message: `column "lease_token" of relation "queue_jobs" does not exist`}, false, true},
		{"bare column from fleet", pgconn.PgError{Code: "42703", Message: `column j.lease_token does not exist`}, true, true},
		{"bare column from the app", pgconn.PgError{Code: "42703", Message: `column "total" does not exist`}, false, false},
		{"app function from the app", pgconn.PgError{Code: "42883", Message: `function order_total(integer) does not exist`}, false, false},
		{"other code", pgconn.PgError{Code: "23505", Message: `duplicate key value violates unique constraint "queue_jobs_pkey"`}, true, false},
	}
	for _, c := range cases {
		pg := c.pg
		err := explainDatabaseError(fmt.Errorf("run: %w", &pg), c.fleetCommand)
		if got := errors.Is(err, errNotMigrated); got != c.want {
			t.Errorf("%s: not migrated %v, want %v (%v)", c.name, got, c.want, err)
		}
		if !c.want && !errors.Is(err, &pg) {
			t.Errorf("%s: PostgreSQL's error is lost: %v", c.name, err)
		}
	}
	if explainDatabaseError(nil, true) != nil {
		t.Error("nil is not nil")
	}
}
