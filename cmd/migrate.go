package cmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/migrations"
	"github.com/fleet-go/fleet/process"
)

// migrateResult is what migrate, migrate status and migrate down print
// with --json.
type migrateResult struct {
	Applied    *int                   `json:"applied,omitempty"`
	RolledBack *int                   `json:"rolled_back,omitempty"`
	Set        string                 `json:"set,omitempty"`
	Sets       []migrations.SetStatus `json:"sets"`
	// History is the layout of fleet_jobs and fleet_metrics: partitions
	// or hypertables ("" before the fleet set is applied).
	History string `json:"history,omitempty"`
	// ConvertedFrom is the layout migrate converted the history from.
	ConvertedFrom string `json:"converted_from,omitempty"`
}

func (r *runner) migrateCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the queue and fleet migration sets (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			url, cfg, err := r.migrationSetup(c.Context())
			if err != nil {
				return err
			}
			res, err := migrations.UpWith(c.Context(), url, migrations.Options{Timescale: cfg.Fleet.Timescale})
			if err != nil {
				return err
			}
			statuses, err := migrations.Status(c.Context(), url)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), migrateResult{Applied: &res.Applied, Sets: statuses,
					History: res.Layout, ConvertedFrom: res.ConvertedFrom})
			}
			if res.Applied == 0 && res.ConvertedFrom == "" {
				fmt.Fprintln(c.OutOrStdout(), "nothing to migrate: the database is up to date")
			} else if res.Applied > 0 {
				fmt.Fprintf(c.OutOrStdout(), "applied %d migration(s)\n", res.Applied)
			}
			if res.ConvertedFrom != "" {
				fmt.Fprintf(c.OutOrStdout(), "converted the history from %s to %s (fleet.timescale = %q)\n",
					layoutName(res.ConvertedFrom), layoutName(res.Layout), cfg.Fleet.Timescale)
			}
			printMigrationStatus(c, statuses)
			printHistoryLayout(c, res.Layout)
			return nil
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Print each migration set's version and whether it is dirty",
		Long: "Print each migration set's version and whether it is dirty. " +
			"Exits 7 while a set has pending migrations or is dirty, so a deploy script can wait for or refuse it.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			url, err := r.migrationURL(c.Context())
			if err != nil {
				return err
			}
			statuses, err := migrations.Status(c.Context(), url)
			if err != nil {
				return err
			}
			layout, err := migrations.HistoryLayout(c.Context(), url)
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(c.OutOrStdout(), migrateResult{Sets: statuses, History: layout}); err != nil {
					return err
				}
			} else {
				printMigrationStatus(c, statuses)
				printHistoryLayout(c, layout)
			}
			return migrationsPending(statuses)
		},
	}
	var set string
	var steps int
	down := &cobra.Command{
		Use:   "down --set NAME --steps N",
		Short: "Roll back the last N migrations of one set",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			url, err := r.migrationURL(c.Context())
			if err != nil {
				return err
			}
			if err := migrations.Down(c.Context(), url, set, steps); err != nil {
				return err
			}
			statuses, err := migrations.Status(c.Context(), url)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), migrateResult{RolledBack: &steps, Set: set, Sets: statuses})
			}
			printMigrationStatus(c, statuses)
			return nil
		},
	}
	down.Flags().StringVar(&set, "set", "", "migration set to roll back: queue or fleet (required)")
	down.Flags().IntVar(&steps, "steps", 1, "how many migrations to roll back")
	_ = down.MarkFlagRequired("set")
	c.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	var sqlSet string
	printSQL := &cobra.Command{
		Use:   "sql [--set queue|fleet]",
		Short: "Print the SQL of every migration, for a migration tool of your own (needs no database)",
		Long: "Prints each up migration of the queue then the fleet set (or of --set) as a transaction of its own, " +
			"which also records its version in the set's table (queue_schema_migrations, fleet_schema_migrations), " +
			"so that `app migrate` and `app migrate status` agree with a database migrated from it. Run it on a " +
			"database that has none of them, or keep only the migrations after the version it records.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := migrations.WriteSQL(c.OutOrStdout(), sqlSet); err != nil {
				return usage(err)
			}
			return nil
		},
	}
	printSQL.Flags().StringVar(&sqlSet, "set", "", "only this set: queue or fleet")
	c.AddCommand(status, down, printSQL)
	return c
}

// migrationURL returns the URL migrations run on (database.direct_url when
// set, see process.Database.MigrationTarget) after checking that the database
// answers, so an unreachable one is a single clear line.
func (r *runner) migrationURL(ctx context.Context) (string, error) {
	url, _, err := r.migrationSetup(ctx)
	return url, err
}

// migrationSetup is migrationURL with the configuration it read.
func (r *runner) migrationSetup(ctx context.Context) (string, *config.Config, error) {
	cfg, err := r.loadConfig()
	if err != nil {
		return "", nil, err
	}
	db, err := process.DatabaseOf(cfg)
	if err != nil {
		return "", nil, err
	}
	target, err := db.MigrationTarget()
	if err != nil {
		return "", nil, err
	}
	pool, err := process.OpenPool(ctx, target, 1, "fleet migrate")
	if err != nil {
		return "", nil, err
	}
	pool.Close()
	return target.URL, cfg, nil
}

// layoutName says a history layout in words.
func layoutName(layout string) string {
	switch layout {
	case migrations.LayoutHypertables:
		return "TimescaleDB hypertables"
	case migrations.LayoutPartitions:
		return "native partitions"
	}
	return layout
}

// printHistoryLayout prints the line that says where the history lives,
// when the fleet set has made its tables.
func printHistoryLayout(c *cobra.Command, layout string) {
	if layout == "" {
		return
	}
	fmt.Fprintf(c.OutOrStdout(), "history: %s (fleet_jobs, fleet_metrics)\n", layoutName(layout))
}

// migrationsPending returns an ExitMigrationsPending error, silent (the
// status says it), when a set is dirty or behind its latest version.
func migrationsPending(statuses []migrations.SetStatus) error {
	for _, s := range statuses {
		if s.Dirty || s.Version < s.Latest {
			return &exitError{code: ExitMigrationsPending, err: fmt.Errorf("migration set %s is not up to date", s.Set), silent: true}
		}
	}
	return nil
}

func printMigrationStatus(c *cobra.Command, statuses []migrations.SetStatus) {
	for _, s := range statuses {
		state := "clean"
		if s.Dirty {
			state = "DIRTY (a migration failed half-way: fix it, then force the version)"
		}
		pending := ""
		if s.Version < s.Latest {
			pending = fmt.Sprintf(", %d pending", s.Latest-s.Version)
		}
		fmt.Fprintf(c.OutOrStdout(), "%-6s version %d of %d, %s%s\n", s.Set, s.Version, s.Latest, state, pending)
	}
}
