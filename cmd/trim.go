package cmd

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/store"
)

// How far ahead fleet:trim creates history partitions on native
// partitions: as far as the master's upkeep does.
const (
	trimPartitionsHoursAhead = 48
	trimPartitionsDaysAhead  = 8
)

// trimResult is what fleet:trim prints with --json.
type trimResult struct {
	DryRun bool `json:"dry_run"`
	// Layout is the history's layout: partitions or hypertables.
	Layout    string `json:"layout"`
	Timescale string `json:"timescale,omitempty"`
	// Keep is the retention, from [fleet.trim].
	Keep config.TrimConfig `json:"keep"`
	// Dropped are the partitions or chunks dropped (would be, with
	// --dry-run), oldest first per table.
	Dropped []store.TrimmedPart `json:"dropped"`
	// DroppedBytes is their size on disk.
	DroppedBytes int64 `json:"dropped_bytes"`
	// PartitionsCreated counts the partitions created ahead (native
	// partitions only; none on a dry run).
	PartitionsCreated int `json:"partitions_created"`
	// FailedJobs counts the failed jobs (queue_failed_jobs) older than
	// fleet.trim.failed_days deleted (would be, with --dry-run).
	FailedJobs int64 `json:"failed_jobs"`
}

// trimCommand is fleet:trim: the history upkeep a master does every ten
// minutes, now. It drops the partitions (on TimescaleDB, the chunks) of the
// history and the snapshots that ended past their [fleet.trim] retention,
// creates the partitions ahead on native partitions, deletes the failed
// jobs past fleet.trim.failed_days, and says what it did; --dry-run says
// what it would do and changes nothing.
func (r *runner) trimCommand() *cobra.Command {
	var asJSON, dryRun bool
	c := &cobra.Command{
		Use:   "fleet:trim [--dry-run]",
		Short: "Trim the history now: drop its partitions or chunks past [fleet.trim], and old failed jobs",
		Long: "Runs the history upkeep a master runs every ten minutes, now: it drops the partitions of fleet_jobs " +
			"and fleet_metrics (on TimescaleDB, their chunks) whose range ended more than their retention ago " +
			"(fleet.trim.completed_hours for completed attempts, fleet.trim.failed_days for the others, " +
			"fleet.trim.metrics_days for the snapshots), creates the partitions ahead (native partitions only), " +
			"and deletes the failed jobs older than fleet.trim.failed_days. History goes by whole partitions or " +
			"chunks, never row by row. It lists what it dropped; with --dry-run, what it would drop, changing nothing.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return r.withStore(c.Context(), func(cfg *config.Config, st *store.Store) error {
				ctx := c.Context()
				layout, err := st.HistoryLayout(ctx)
				if err != nil {
					return err
				}
				res := trimResult{DryRun: dryRun, Layout: layout.Kind, Timescale: layout.Timescale, Keep: cfg.Fleet.Trim}
				p := store.TrimParams{CompletedHours: cfg.Fleet.Trim.CompletedHours, FailedDays: cfg.Fleet.Trim.FailedDays,
					MetricsDays: cfg.Fleet.Trim.MetricsDays}
				failedAge := time.Duration(p.FailedDays) * 24 * time.Hour
				if !dryRun {
					if res.PartitionsCreated, err = st.PartitionsEnsure(ctx, trimPartitionsHoursAhead, trimPartitionsDaysAhead); err != nil {
						return err
					}
				}
				if res.Dropped, err = st.HistoryTrim(ctx, p, dryRun); err != nil {
					return err
				}
				if dryRun {
					res.FailedJobs, err = st.FailedJobTrimCount(ctx, failedAge)
				} else {
					res.FailedJobs, err = st.FailedJobTrim(ctx, failedAge)
				}
				if err != nil {
					return err
				}
				for _, d := range res.Dropped {
					res.DroppedBytes += d.Bytes
				}
				if res.Dropped == nil {
					res.Dropped = []store.TrimmedPart{}
				}
				if asJSON {
					return printJSON(c.OutOrStdout(), res)
				}
				printTrim(c.OutOrStdout(), res)
				return nil
			})
		},
	}
	c.Flags().BoolVar(&dryRun, "dry-run", false, "say what it would drop and delete, and change nothing")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// printTrim prints what fleet:trim did.
func printTrim(w io.Writer, res trimResult) {
	unit, verb := "partition", "dropped"
	where := "native partitions"
	if res.Layout == store.LayoutHypertables {
		unit, where = "chunk", "TimescaleDB hypertables"
		if res.Timescale != "" {
			where += " (timescaledb " + res.Timescale + ")"
		}
	}
	if res.DryRun {
		verb = "would drop"
	}
	fmt.Fprintf(w, "history on %s; keeping completed attempts %d h, other attempts %d d, snapshots %d d\n",
		where, res.Keep.CompletedHours, res.Keep.FailedDays, res.Keep.MetricsDays)
	for _, d := range res.Dropped {
		span := "range unknown"
		if !d.From.IsZero() {
			span = d.From.UTC().Format("2006-01-02 15:04") + " to " + d.To.UTC().Format("2006-01-02 15:04") + " UTC"
		}
		fmt.Fprintf(w, "%s %-20s %s  %s  %s\n", verb, d.Table, d.Name, span, sizeText(d.Bytes))
	}
	failedVerb := "deleted"
	if res.DryRun {
		failedVerb = "would delete"
	}
	fmt.Fprintf(w, "%s %d %s(s) (%s); %s %d failed job(s) older than %d d",
		verb, len(res.Dropped), unit, sizeText(res.DroppedBytes), failedVerb, res.FailedJobs, res.Keep.FailedDays)
	if res.PartitionsCreated > 0 {
		fmt.Fprintf(w, "; created %d partition(s) ahead", res.PartitionsCreated)
	}
	fmt.Fprintln(w)
	if res.DryRun {
		fmt.Fprintln(w, "dry run: nothing was changed")
	}
}

// sizeText says a size on disk in bytes, kB, MB or GB (powers of 1000).
func sizeText(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
