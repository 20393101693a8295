package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/queue"
)

// clearCommand is fleet:clear: it deletes a queue's jobs that no worker
// holds, with the guards of fleet:retry --all: it asks on a terminal and
// needs --yes otherwise; --dry-run counts and deletes nothing.
func (r *runner) clearCommand() *cobra.Command {
	var q string
	var asJSON, yes, dryRun bool
	c := &cobra.Command{
		Use:   "fleet:clear --queue Q [--yes] [--dry-run]",
		Short: "Delete a queue's jobs that are not running (pending, delayed, limited)",
		Long: "Deletes the jobs of one queue that no worker holds: pending, delayed (also those waiting for a " +
			"retry) and limited ones (waiting for a slot of their concurrency limit). Running jobs are left " +
			"alone, and so are jobs dispatched once it has begun. A deleted job gives its limit slot back, and " +
			"a deleted unique job frees its key. It deletes in batches, each a short transaction.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if !c.Flags().Changed("queue") {
				return usagef("--queue is required: the queue whose jobs to delete")
			}
			if err := queue.CheckQueue("--queue", q); err != nil {
				return usage(err)
			}
			if !dryRun && !yes && !stdinIsTerminal(r.app.Stdin) {
				return usagef("%s deletes every job of queue %q that is not running: add --yes to confirm (stdin is not a terminal, so it cannot ask), or --dry-run to count them",
					c.Name(), q)
			}
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				ctx, out := c.Context(), c.OutOrStdout()
				if dryRun || !yes {
					n, err := svc.ClearCount(ctx, q)
					if err != nil {
						return err
					}
					if dryRun {
						if asJSON {
							return printJSON(out, map[string]any{"dry_run": true, "queue": q, "would_delete": n})
						}
						fmt.Fprintf(out, "dry run: would delete %d job(s) of queue %q (pending, delayed and limited; running ones stay); nothing was changed\n", n, q)
						return nil
					}
					ok, err := confirm(r.app.Stdin, c.ErrOrStderr(), fmt.Sprintf("delete %d job(s) of queue %q that are not running?", n, q))
					if err != nil {
						return err
					}
					if !ok {
						return errNotConfirmed
					}
				}
				n, err := svc.Clear(ctx, q)
				if err != nil {
					return fmt.Errorf("clear queue %q (deleted %d job(s) before the error): %w", q, n, err)
				}
				if asJSON {
					return printJSON(out, map[string]any{"queue": q, "deleted": n})
				}
				fmt.Fprintf(out, "deleted %d job(s) of queue %q\n", n, q)
				return nil
			})
		},
	}
	c.Flags().StringVar(&q, "queue", "", "the queue to clear (required)")
	c.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation (required when stdin is not a terminal)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "say how many jobs it would delete, and delete nothing")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
