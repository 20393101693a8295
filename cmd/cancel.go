package cmd

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
)

func (r *runner) cancelCommand() *cobra.Command {
	var queueName string
	var all, asJSON, yes, dryRun bool
	c := &cobra.Command{
		Use:   "fleet:cancel ID... | --queue Q --all [--yes] [--dry-run]",
		Short: "Cancel jobs: waiting ones at once, running ones by stopping their handler; never retried",
		Long: "A job no worker holds (pending, delayed, waiting for a concurrency slot) is deleted at once and " +
			"recorded as cancelled. A running job's worker is told to stop it: the handler's context is cancelled " +
			"(its cause is queue.ErrCancelled) and the attempt recorded as cancelled when the handler returns. " +
			"With --queue Q --all, every job of Q queued now is cancelled. It exits 1 when an ID was not found " +
			"(finished, failed, cancelled already, or never there).",
		RunE: func(c *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return usagef("give job IDs or --queue Q --all, not both")
			case all && queueName == "":
				return usagef("--all needs --queue Q: the queue whose jobs to cancel")
			case !all && c.Flags().Changed("queue"):
				return usagef("--queue goes with --all")
			case !all && len(args) == 0:
				return usagef("give the IDs of the jobs to cancel (see fleet:jobs --pending), or --queue Q --all")
			case !all && (yes || dryRun):
				return usagef("--yes and --dry-run go with --all")
			}
			ids := make([]int64, len(args))
			for i, a := range args {
				id, err := strconv.ParseInt(a, 10, 64)
				if err != nil || id < 1 {
					return usagef("ID %q is not a job id: it must be a positive whole number", a)
				}
				ids[i] = id
			}
			if err := checkQueueFilter(c, queueName); err != nil {
				return err
			}
			if all && !dryRun && !yes && !stdinIsTerminal(r.app.Stdin) {
				return usagef("%s --all cancels every job of queue %q: add --yes to confirm (stdin is not a terminal, so it cannot ask), or --dry-run to count them",
					c.Name(), queueName)
			}
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				ctx, out := fleet.WithActor(c.Context(), cliActor()), c.OutOrStdout()
				if !all {
					return cancelIDs(ctx, c, svc, ids, asJSON)
				}
				n, err := svc.CancelQueueCount(ctx, queueName)
				if err != nil {
					return err
				}
				if dryRun {
					if asJSON {
						return printJSON(out, map[string]any{"dry_run": true, "queue": queueName, "would_cancel": n.Waiting, "would_stop": n.Running})
					}
					fmt.Fprintf(out, "dry run: would cancel %d waiting job(s) of queue %q and stop %d running one(s); nothing was changed\n",
						n.Waiting, queueName, n.Running)
					return nil
				}
				if !yes {
					ok, err := confirm(r.app.Stdin, c.ErrOrStderr(), fmt.Sprintf("cancel %d waiting and %d running job(s) of queue %q?", n.Waiting, n.Running, queueName))
					if err != nil {
						return err
					}
					if !ok {
						return errNotConfirmed
					}
				}
				res, err := svc.CancelQueue(ctx, queueName)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(out, res)
				}
				fmt.Fprintf(out, "cancelled %d job(s) of queue %q; asked the workers of %d running one(s) to stop them\n",
					res.Cancelled, queueName, res.Requested)
				return nil
			})
		},
	}
	c.Flags().StringVar(&queueName, "queue", "", "with --all: the queue whose jobs to cancel")
	c.Flags().BoolVar(&all, "all", false, "cancel every job of --queue")
	c.Flags().BoolVar(&yes, "yes", false, "with --all: do not ask for confirmation (required when stdin is not a terminal)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "with --all: count the jobs it would cancel, and do nothing")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// cancelIDs cancels jobs by id and prints a line per id; an id not found
// makes it exit 1, naming them.
func cancelIDs(ctx context.Context, c *cobra.Command, svc *fleet.Service, ids []int64, asJSON bool) error {
	res, err := svc.Cancel(ctx, ids...)
	if err != nil {
		return err
	}
	out := c.OutOrStdout()
	if asJSON {
		if err := printJSON(out, res); err != nil {
			return err
		}
	} else {
		for _, j := range res.Jobs {
			switch j.Outcome {
			case fleet.CancelDone:
				fmt.Fprintf(out, "job %d: cancelled\n", j.ID)
			case fleet.CancelRequested:
				fmt.Fprintf(out, "job %d: running; its worker was asked to stop it, and records it as cancelled\n", j.ID)
			default:
				fmt.Fprintf(out, "job %d: not found (finished, failed, cancelled already, or never there)\n", j.ID)
			}
		}
	}
	if len(res.NotFound) == 0 {
		return nil
	}
	names := make([]string, len(res.NotFound))
	for i, id := range res.NotFound {
		names[i] = strconv.FormatInt(id, 10)
	}
	return notFoundf("no queued job with id %s", strings.Join(names, ", "))
}

// cliActor is who a cancel from this shell is recorded as made by:
// user@host.
func cliActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return name + "@" + host + " (fleet:cancel)"
}
