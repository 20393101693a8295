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
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for golang-migrate
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

// Up applies every pending migration of every set, in order. Running it again
// changes nothing. It reports how many migrations it applied itself: runs
// at the same time on one database take turns per set, and each counts only
// the migrations it applied, so together they report each migration once.
func Up(ctx context.Context, databaseURL string) (int, error) {
	applied := 0
	for _, set := range Sets() {
		n, err := withMigrate(ctx, databaseURL, set, true, func(m *migrate.Migrate) (int, error) {
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
			return applied, fmt.Errorf("migrate set %q up: %w", set.Name, err)
		}
		applied += n
	}
	return applied, nil
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
	_, err := withMigrate(ctx, databaseURL, set, true, func(m *migrate.Migrate) (int, error) {
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
		_, err = withMigrate(ctx, databaseURL, set, false, func(m *migrate.Migrate) (int, error) {
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
// bound to that set's table. golang-migrate takes no context, so ctx only
// bounds opening the connection (and waiting for the set's lock).
//
// With exclusive, fn runs holding a session advisory lock of the set's
// own, taken before fn reads the version it starts from: golang-migrate
// locks only around each of its calls, so two runs could both read the
// version before either migrated and both count the other's migrations.
func withMigrate(ctx context.Context, databaseURL string, set Set, exclusive bool, fn func(*migrate.Migrate) (int, error)) (int, error) {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return 0, fmt.Errorf("open database: %w", err)
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
