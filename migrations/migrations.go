// Package migrations holds the embedded SQL of fleet's two migration sets,
// "queue" then "fleet", and applies them with golang-migrate. Each set keeps
// its version in a table of its own, so the sets move independently.
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

//go:embed queue/*.sql fleet/*.sql
var files embed.FS

// Set is one migration set: a folder of numbered SQL files and the table that
// records how far it has been applied.
type Set struct {
	Name  string
	Table string
}

// Sets returns the migration sets in the order they are applied.
func Sets() []Set {
	return []Set{
		{Name: "queue", Table: "queue_schema_migrations"},
		{Name: "fleet", Table: "fleet_schema_migrations"},
	}
}

// SetStatus is how far one set has been applied.
type SetStatus struct {
	Set     string `json:"set"`
	Version uint   `json:"version"`
	Latest  uint   `json:"latest"`
	Dirty   bool   `json:"dirty"`
	Applied bool   `json:"applied"`
}

// Up applies every pending migration of every set, in order, with the
// default Options. It reports how many migrations it applied (see UpWith).
func Up(ctx context.Context, databaseURL string) (int, error) {
	res, err := UpWith(ctx, databaseURL, Options{})
	return res.Applied, err
}

// The values of Options.Timescale, the configuration key fleet.timescale.
const (
	// TimescaleAuto puts the history on hypertables when the timescaledb
	// extension is installed in the database, else on native partitions.
	TimescaleAuto = "auto"
	// TimescaleOff keeps the history on native partitions.
	TimescaleOff = "off"
)

// The layouts of the history and snapshot tables (UpResult.Layout).
const (
	// LayoutPartitions: fleet_jobs and fleet_metrics are partitioned by
	// PostgreSQL itself.
	LayoutPartitions = "partitions"
	// LayoutHypertables: fleet_jobs_completed, fleet_jobs_failed and
	// fleet_metrics are TimescaleDB hypertables, and fleet_jobs a view of
	// the first two.
	LayoutHypertables = "hypertables"
)

// Options shape UpWith.
type Options struct {
	// Timescale says which layout the history takes: TimescaleAuto (also
	// "") or TimescaleOff. It reaches the migrations' SQL as the setting
	// fleet.timescale of their sessions.
	Timescale string
}

// UpResult is what UpWith did.
type UpResult struct {
	// Applied counts the migrations this run applied itself.
	Applied int `json:"applied"`
	// Layout is the history's layout afterwards: LayoutPartitions or
	// LayoutHypertables.
	Layout string `json:"layout"`
	// ConvertedFrom is the layout the history was converted from by this
	// run, "" when it was not converted (or did not exist before).
	ConvertedFrom string `json:"converted_from,omitempty"`
}

// UpWith applies every pending migration of every set, in order, then puts
// the history in the layout opts ask for: a database whose history is in
// the other layout (migrated before TimescaleDB was installed, or with
// another fleet.timescale) is converted, its rows moved, not copied beside
// them. Running it again changes nothing. It reports how many migrations
// it applied itself: runs at the same time on one database take turns per
// set, and each counts only the migrations it applied, so together they
// report each migration once.
func UpWith(ctx context.Context, databaseURL string, opts Options) (UpResult, error) {
	var res UpResult
	setting, err := timescaleSetting(opts.Timescale)
	if err != nil {
		return res, err
	}
	before, err := historyLayout(ctx, databaseURL, setting)
	if err != nil {
		return res, err
	}
	for _, set := range Sets() {
		n, err := withMigrate(ctx, databaseURL, setting, set, true, func(m *migrate.Migrate) (int, error) {
			before, _, err := version(m)
			if err != nil {
				return 0, err
			}
			if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
				return 0, err
			}
			after, _, err := version(m)
			if err != nil {
				return 0, err
			}
			return countBetween(set, before, after)
		})
		if err != nil {
			return res, fmt.Errorf("migrate set %q up: %w", set.Name, err)
		}
		res.Applied += n
	}
	db, err := openDB(databaseURL, setting)
	if err != nil {
		return res, err
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, `SELECT fleet_history_convert()`).Scan(&res.Layout); err != nil {
		return res, fmt.Errorf("put the history in its layout (fleet.timescale = %q): %w", setting, err)
	}
	if before != "" && before != res.Layout {
		res.ConvertedFrom = before
	}
	return res, nil
}

// timescaleSetting checks a value of Options.Timescale and returns it as
// the migrations read it.
func timescaleSetting(v string) (string, error) {
	switch v {
	case "", TimescaleAuto:
		return TimescaleAuto, nil
	case TimescaleOff:
		return TimescaleOff, nil
	}
	return "", fmt.Errorf("fleet.timescale is %q: want %q or %q", v, TimescaleAuto, TimescaleOff)
}

// HistoryLayout reads the layout of the history and snapshot tables:
// LayoutPartitions, LayoutHypertables, or "" when the fleet set has not
// created them.
func HistoryLayout(ctx context.Context, databaseURL string) (string, error) {
	return historyLayout(ctx, databaseURL, TimescaleAuto)
}

// historyLayout reads the history's layout, "" when fleet_jobs does not
// exist (yet).
func historyLayout(ctx context.Context, databaseURL, setting string) (string, error) {
	db, err := openDB(databaseURL, setting)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var layout sql.NullString
	err = db.QueryRowContext(ctx, `
		SELECT CASE c.relkind WHEN 'v' THEN 'hypertables' WHEN 'p' THEN 'partitions' END
		FROM pg_class c WHERE c.oid = to_regclass('fleet_jobs')`).Scan(&layout)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("read the history's layout: %w", err)
	}
	return layout.String, nil
}

// Down rolls back the last steps migrations of the named set.
func Down(ctx context.Context, databaseURL, setName string, steps int) error {
	if steps < 1 {
		return fmt.Errorf("--steps must be at least 1, got %d", steps)
	}
	set, ok := findSet(setName)
	if !ok {
		return fmt.Errorf("unknown migration set %q (sets: queue, fleet)", setName)
	}
	_, err := withMigrate(ctx, databaseURL, TimescaleAuto, set, true, func(m *migrate.Migrate) (int, error) {
		err := m.Steps(-steps)
		if errors.Is(err, migrate.ErrNoChange) {
			return 0, nil
		}
		return 0, err
	})
	if err != nil {
		return fmt.Errorf("migrate set %q down %d: %w", setName, steps, err)
	}
	return nil
}

// Status reports each set's applied version and whether it is dirty.
func Status(ctx context.Context, databaseURL string) ([]SetStatus, error) {
	var out []SetStatus
	for _, set := range Sets() {
		latest, err := latestVersion(set)
		if err != nil {
			return nil, err
		}
		st := SetStatus{Set: set.Name, Latest: latest}
		_, err = withMigrate(ctx, databaseURL, TimescaleAuto, set, false, func(m *migrate.Migrate) (int, error) {
			v, dirty, err := version(m)
			st.Version, st.Dirty, st.Applied = v, dirty, v > 0
			return 0, err
		})
		if err != nil {
			return nil, fmt.Errorf("migration status of set %q: %w", set.Name, err)
		}
		out = append(out, st)
	}
	return out, nil
}

func findSet(name string) (Set, bool) {
	for _, s := range Sets() {
		if s.Name == name {
			return s, true
		}
	}
	return Set{}, false
}

func latestVersion(set Set) (uint, error) {
	entries, err := fs.ReadDir(files, set.Name)
	if err != nil {
		return 0, fmt.Errorf("read embedded set %q: %w", set.Name, err)
	}
	var latest uint
	for _, e := range entries {
		var v uint
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err == nil && v > latest {
			latest = v
		}
	}
	return latest, nil
}

// Count returns how many migrations the named set has: the steps that
// Down takes to remove all of it.
func Count(setName string) (int, error) {
	set, ok := findSet(setName)
	if !ok {
		return 0, fmt.Errorf("unknown migration set %q (sets: queue, fleet)", setName)
	}
	versions, err := versionsOf(set)
	return len(versions), err
}

// countBetween counts the embedded migrations of set whose version is
// above before and at most after: versions need not be consecutive.
func countBetween(set Set, before, after uint) (int, error) {
	versions, err := versionsOf(set)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range versions {
		if v > before && v <= after {
			n++
		}
	}
	return n, nil
}

// versionsOf lists the versions of set's embedded up migrations.
func versionsOf(set Set) ([]uint, error) {
	entries, err := fs.ReadDir(files, set.Name)
	if err != nil {
		return nil, fmt.Errorf("read embedded set %q: %w", set.Name, err)
	}
	var out []uint
	for _, e := range entries {
		var v uint
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err == nil && strings.HasSuffix(e.Name(), ".up.sql") {
			out = append(out, v)
		}
	}
	return out, nil
}

func version(m *migrate.Migrate) (uint, bool, error) {
	v, dirty, err := m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	return v, dirty, err
}

// withMigrate opens a connection for one set and runs fn with a migrator
// bound to that set's table; its sessions have fleet.timescale set to
// timescale. golang-migrate takes no context, so ctx only bounds opening
// the connection (and waiting for the set's lock).
//
// With exclusive, fn runs holding a session advisory lock of the set's
// own, taken before fn reads the version it starts from: golang-migrate
// locks only around each of its calls, so two runs could both read the
// version before either migrated and both count the other's migrations.
func withMigrate(ctx context.Context, databaseURL, timescale string, set Set, exclusive bool, fn func(*migrate.Migrate) (int, error)) (int, error) {
	db, err := openDB(databaseURL, timescale)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return 0, fmt.Errorf("connect to database: %w", err)
	}
	if exclusive {
		lock, err := db.Conn(ctx)
		if err != nil {
			return 0, fmt.Errorf("connect to database: %w", err)
		}
		defer lock.Close()
		key := "fleet migrations " + set.Table
		if _, err := lock.ExecContext(ctx, "SELECT pg_advisory_lock(hashtext($1))", key); err != nil {
			return 0, fmt.Errorf("lock migration set %q: %w", set.Name, err)
		}
		defer func() { _, _ = lock.ExecContext(context.Background(), "SELECT pg_advisory_unlock(hashtext($1))", key) }()
	}
	driver, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{MigrationsTable: set.Table})
	if err != nil {
		return 0, fmt.Errorf("prepare migrations table %s: %w", set.Table, err)
	}
	sub, err := fs.Sub(files, set.Name)
	if err != nil {
		return 0, fmt.Errorf("embedded set %q: %w", set.Name, err)
	}
	src, err := iofs.New(sub, ".")
	if err != nil {
		return 0, fmt.Errorf("embedded set %q: %w", set.Name, err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		return 0, fmt.Errorf("set %q: %w", set.Name, err)
	}
	defer m.Close()
	return fn(m)
}

// openDB opens a database/sql pool on databaseURL whose sessions have the
// setting fleet.timescale, which the migrations read, set to timescale. It
// is a setting of the session, not a startup parameter, so that a pooler
// that refuses unknown startup parameters lets it through.
func openDB(databaseURL, timescale string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	return stdlib.OpenDB(*cfg, stdlib.OptionAfterConnect(func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, `SELECT set_config('fleet.timescale', $1, false)`, timescale); err != nil {
			return fmt.Errorf("set fleet.timescale: %w", err)
		}
		return nil
	})), nil
}

// Fingerprint is a short hash of every embedded migration file. Test
// harnesses name template databases after it so a changed migration never
// reuses a stale template.
func Fingerprint() string {
	h := sha256.New()
	_ = fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// WriteSQL writes every up migration of the named set ("" for both, in
// the order Up applies them) as one SQL script, for teams that apply
// migrations with a tool of their own. Each migration is a transaction of
// its own that also records its version where Up and Status look for it
// (the set's table), so that `app migrate` and `app migrate status` agree
// with a database migrated from the script; a migration already recorded
// is applied again, so run the script on a database that has none of
// them, or take the migrations after its version.
func WriteSQL(w io.Writer, setName string) error {
	if setName != "" {
		if _, ok := findSet(setName); !ok {
			return fmt.Errorf("no migration set named %q (want queue or fleet)", setName)
		}
	}
	for _, set := range Sets() {
		if setName != "" && set.Name != setName {
			continue
		}
		versions, err := versionsOf(set)
		if err != nil {
			return err
		}
		slices.Sort(versions)
		for _, v := range versions {
			name, body, err := upFile(set, v)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(w, `-- fleet migration set %q, version %d (%s)
BEGIN;
%s
CREATE TABLE IF NOT EXISTS %s (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL);
DELETE FROM %s;
INSERT INTO %s (version, dirty) VALUES (%d, false);
COMMIT;

`, set.Name, v, name, strings.TrimSpace(body), set.Table, set.Table, set.Table, v)
			if err != nil {
				return fmt.Errorf("write the SQL of set %q: %w", set.Name, err)
			}
		}
	}
	return nil
}

// upFile returns the name and text of the up migration of set with
// version v.
func upFile(set Set, v uint) (string, string, error) {
	entries, err := fs.ReadDir(files, set.Name)
	if err != nil {
		return "", "", fmt.Errorf("read embedded set %q: %w", set.Name, err)
	}
	for _, e := range entries {
		var n uint
		if _, err := fmt.Sscanf(e.Name(), "%d_", &n); err == nil && n == v && strings.HasSuffix(e.Name(), ".up.sql") {
			b, err := fs.ReadFile(files, set.Name+"/"+e.Name())
			if err != nil {
				return "", "", fmt.Errorf("read embedded %s: %w", e.Name(), err)
			}
			return e.Name(), string(b), nil
		}
	}
	return "", "", fmt.Errorf("embedded set %q has no up migration %d", set.Name, v)
}
