package cmd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/store"
)

// withService runs fn with a fleet.Service on the configured database.
func (r *runner) withService(ctx context.Context, fn func(*config.Config, *fleet.Service) error) error {
	return r.withStore(ctx, func(cfg *config.Config, st *store.Store) error {
		return fn(cfg, fleet.FromConfig(st.Pool(), cfg))
	})
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printList writes a listing as --json gives every list: an object with
// the items under key, never a bare array. A paged listing (limit > 0)
// adds its page: count (items here), limit, offset, and next_offset, the
// offset of the next page, or null when this page was not full (so
// nothing follows).
func printList[T any](w io.Writer, key string, items []T, limit, offset int) error {
	if items == nil {
		items = []T{}
	}
	v := map[string]any{key: items}
	if limit > 0 {
		var next *int
		if len(items) >= limit {
			n := offset + len(items)
			next = &n
		}
		v["count"], v["limit"], v["offset"], v["next_offset"] = len(items), limit, offset, next
	}
	return printJSON(w, v)
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func (r *runner) workloadCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "fleet:workload",
		Short: "Per queue: pending, delayed, running and limited jobs, oldest wait, runtime, processes, jobs per minute",
		Long: "PENDING jobs are ready for a worker, DELAYED ones wait for their time, LIMITED ones for a slot of " +
			"their concurrency limit (a job of the same limit key finishing hands its slot over).",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				loads, err := svc.Workload(c.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return printList(c.OutOrStdout(), "queues", loads, 0, 0)
				}
				tw := table(c.OutOrStdout())
				fmt.Fprintln(tw, "QUEUE\tPENDING\tDELAYED\tRUNNING\tLIMITED\tOLDEST WAIT\tAVG RUNTIME\tWORKLOAD\tPROCESSES\tJOBS/MIN\t")
				var unworked []string
				for _, l := range loads {
					name := l.Queue
					if l.Paused {
						name += " (paused)"
					}
					if l.Unworked {
						name += " (unworked)"
						unworked = append(unworked, l.Queue)
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%.0fms\t%s\t%d\t%.0f\t\n", name, l.Pending, l.Delayed, l.Reserved, l.Limited,
						secs(l.OldestWaitSecs), l.AvgRuntimeMs, secs(l.WorkloadSecs), l.Processes, l.JobsPerMinute)
				}
				if len(loads) == 0 {
					fmt.Fprintln(tw, "(no queue has jobs, recent history or processes)")
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				// A queue's "(paused)" is its own pause; a paused supervisor
				// stops every queue it works, so say which are.
				paused, err := svc.PausedState(c.Context())
				if err != nil {
					return err
				}
				if len(unworked) > 0 {
					fmt.Fprintf(c.OutOrStdout(), "unworked: no supervisor of a live master works %s: their jobs wait until a master that works them starts\n",
						strings.Join(unworked, ", "))
				}
				switch {
				case paused.All:
					fmt.Fprintln(c.OutOrStdout(), "every supervisor is paused (fleet:pause): no queue is worked")
				case len(paused.Supervisors) > 0:
					fmt.Fprintf(c.OutOrStdout(), "paused supervisors: %s (their workers take no job from any of their queues)\n", strings.Join(paused.Supervisors, ", "))
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func secs(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
}

func (r *runner) mastersCommand() *cobra.Command {
	var asJSON, all bool
	c := &cobra.Command{
		Use:   "fleet:masters [--all] [--json]",
		Short: "List the live masters, with their supervisors and processes (--all: the recently gone too)",
		Long: "Liveness is measured on the database clock: online, draining (stopping, its children finishing " +
			"their jobs), or offline (its row expired; shown with --all until it is deleted, " +
			"10 minutes after its last beat).",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				v, err := svc.Masters(c.Context(), all)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(c.OutOrStdout(), v)
				}
				tw := table(c.OutOrStdout())
				fmt.Fprintln(tw, "NAME\tLIVENESS\tSTATE\tHOST\tPID\tVERSION\tUP\tBEAT\tCONNS\tSUPERVISORS\t")
				for _, m := range v.Masters {
					conns := "-"
					if m.Connections != nil && m.Liveness != "offline" {
						conns = fmt.Sprintf("%d/%d", m.Connections.Open, m.Connections.Total)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%.1fs ago\t%s\t%s\t\n", m.Name, m.Liveness, m.State, m.Host, m.PID, m.Version,
						m.BeatAt.Sub(m.StartedAt).Round(time.Second), m.BeatAgeSecs, conns, supervisorsSummary(m.Supervisors))
				}
				if len(v.Masters) == 0 {
					fmt.Fprintln(tw, "(no live master)")
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				// CONNS is open now / the budget; a host's line sums its
				// masters, what its PostgreSQL connections must leave room for.
				for _, h := range v.Hosts {
					fmt.Fprintf(c.OutOrStdout(), "host %s: %d connections open, at most %d\n", h.Host, h.Open, h.Total)
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().BoolVar(&all, "all", false, "also list masters that stopped beating recently (offline)")
	return c
}

// supervisorRow is one supervisor of one live master, as fleet:supervisors
// lists it.
type supervisorRow struct {
	Master     string         `json:"master"`
	Instance   string         `json:"instance"`
	Liveness   string         `json:"liveness"`
	Supervisor string         `json:"supervisor"`
	Queues     []string       `json:"queues"`
	Balance    string         `json:"balance"`
	Paused     bool           `json:"paused"`
	Processes  map[string]int `json:"processes"`
	Running    int            `json:"running"`
}

func (r *runner) supervisorsCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "fleet:supervisors [--json]",
		Short: "List the supervisors of the live masters: queues, balance, paused, processes per group",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				v, err := svc.Masters(c.Context(), false)
				if err != nil {
					return err
				}
				rows := []supervisorRow{}
				for _, m := range v.Masters {
					for _, s := range m.ReportedSupervisors() {
						rows = append(rows, supervisorRow{
							Master: m.Name, Instance: m.Instance, Liveness: m.Liveness,
							Supervisor: s.Name, Queues: s.Queues, Balance: s.Balance, Paused: s.Paused,
							Processes: s.Processes, Running: s.Running,
						})
					}
				}
				if asJSON {
					return printJSON(c.OutOrStdout(), map[string]any{"at": v.At, "supervisors": rows})
				}
				tw := table(c.OutOrStdout())
				fmt.Fprintln(tw, "MASTER\tSUPERVISOR\tSTATE\tQUEUES\tBALANCE\tPROCESSES\t")
				for _, s := range rows {
					state := "running"
					if s.Paused {
						state = "paused"
					}
					if s.Liveness != "online" {
						state += " (" + s.Liveness + ")"
					}
					var procs []string
					for g, n := range s.Processes {
						procs = append(procs, fmt.Sprintf("%s:%d", g, n))
					}
					slices.Sort(procs)
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Master, s.Supervisor, state, strings.Join(s.Queues, ","), s.Balance, strings.Join(procs, " "))
				}
				if len(rows) == 0 {
					fmt.Fprintln(tw, "(no supervisor: no live master)")
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// supervisorsSummary renders a master's supervisors column:
// "default[default:1 mail:3] exports(paused)[exports,default:2]".
func supervisorsSummary(raw json.RawMessage) string {
	sups, err := model.DecodeSupervisors(raw)
	if err != nil {
		return "?"
	}
	var parts []string
	for _, s := range sups {
		var procs []string
		for g, n := range s.Processes {
			procs = append(procs, fmt.Sprintf("%s:%d", g, n))
		}
		slices.Sort(procs)
		p := s.Name
		if s.Paused {
			p += "(paused)"
		}
		parts = append(parts, p+"["+strings.Join(procs, " ")+"]")
	}
	return strings.Join(parts, " ")
}

func (r *runner) failedCommand() *cobra.Command {
	var f fleet.FailedFilter
	var asJSON bool
	c := &cobra.Command{
		Use:   "fleet:failed [--search S] [--queue Q] [--tag T]",
		Short: "List failed jobs, newest first (payload secrets redacted)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkPage(f.Limit, f.Offset); err != nil {
				return err
			}
			if err := checkQueueFilter(c, f.Queue); err != nil {
				return err
			}
			if err := checkTagFilter(c, f.Tag); err != nil {
				return err
			}
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				jobs, err := svc.FailedJobs(c.Context(), f)
				if err != nil {
					return err
				}
				if asJSON {
					return printList(c.OutOrStdout(), "failed_jobs", jobs, f.Limit, max(f.Offset, 0))
				}
				tw := table(c.OutOrStdout())
				fmt.Fprintln(tw, "ID\tJOB\tQUEUE\tNAME\tATTEMPTS\tFAILED AT\tERROR\tTAGS\tPAYLOAD\t")
				for _, j := range jobs {
					fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", j.ID, j.JobID, j.Queue, j.Name, j.Attempts,
						j.FailedAt.Format(time.DateTime), firstLine(j.Error, 80), clip(strings.Join(j.Tags, ","), 60), clip(string(j.Payload), 80))
				}
				if len(jobs) == 0 {
					fmt.Fprintln(tw, "(no failed jobs)")
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().StringVar(&f.Search, "search", "", "match name, queue, payload or error (case-insensitive)")
	c.Flags().StringVar(&f.Queue, "queue", "", "only this queue")
	c.Flags().StringVar(&f.Tag, "tag", "", "only jobs with this tag (exactly, e.g. tenant:42)")
	c.Flags().IntVar(&f.Limit, "limit", 100, "at most N jobs")
	c.Flags().IntVar(&f.Offset, "offset", 0, "skip the first N")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	return clip(s, n)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// idOrAll reads the "ID | --all" argument of retry and forget.
func idOrAll(args []string, all bool, search, queue, tag string) (int64, error) {
	switch {
	case all && len(args) > 0:
		return 0, usagef("give a failed job's ID or --all, not both")
	case all:
		return 0, nil
	case len(args) != 1:
		return 0, usagef("give a failed job's ID (see fleet:failed) or --all")
	case search != "" || queue != "" || tag != "":
		return 0, usagef("--search, --queue and --tag go with --all")
	}
	id, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || id < 1 {
		return 0, usagef("ID %q is not a failed job's id: it must be a positive whole number", args[0])
	}
	return id, nil
}

// notFound turns a missing failed job into one clear line and exit 1.
func notFound(id int64, err error) error {
	if errors.Is(err, fleet.ErrFailedJobNotFound) {
		return notFoundf("no failed job with id %d (see fleet:failed)", id)
	}
	return err
}

// failedAction describes a command acting on one failed job by ID or on
// every failed job matching --search/--queue with --all.
type failedAction struct {
	use, short, verb string
	// name is the action in a question or a dry run: "retry", "forget".
	name string
	// all acts on every match and returns how many.
	all func(*fleet.Service, context.Context, fleet.FailedFilter) (int, error)
	// one acts on a single job and returns its result for --json and a
	// line for people.
	one func(context.Context, *fleet.Service, int64) (any, string, error)
}

// describeFilter renders --search/--queue for a question: ` in queue
// "mail" matching "ann"`.
func describeFilter(f fleet.FailedFilter) string {
	var s string
	if f.Queue != "" {
		s += fmt.Sprintf(" in queue %q", f.Queue)
	}
	if f.Tag != "" {
		s += fmt.Sprintf(" tagged %q", f.Tag)
	}
	if f.Search != "" {
		s += fmt.Sprintf(" matching %q", f.Search)
	}
	return s
}

// failedActionCommand builds a fleet:retry / fleet:forget style command.
// --all asks for confirmation on a terminal and needs --yes otherwise;
// --dry-run lists what it would touch and touches nothing.
func (r *runner) failedActionCommand(a failedAction) *cobra.Command {
	var f fleet.FailedFilter
	var all, asJSON, yes, dryRun bool
	c := &cobra.Command{
		Use:   a.use,
		Short: a.short,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			id, err := idOrAll(args, all, f.Search, f.Queue, f.Tag)
			if err != nil {
				return err
			}
			if err := checkQueueFilter(c, f.Queue); err != nil {
				return err
			}
			terminal := stdinIsTerminal(r.app.Stdin)
			if all && !dryRun && !yes && !terminal {
				return usagef("%s --all acts on every failed job%s: add --yes to confirm (stdin is not a terminal, so it cannot ask), or --dry-run to list them",
					c.Name(), describeFilter(f))
			}
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				ctx, out := c.Context(), c.OutOrStdout()
				if dryRun {
					return dryRunFailed(ctx, out, svc, a.name, id, f, asJSON)
				}
				if all {
					if !yes {
						n, err := svc.FailedCount(ctx, f)
						if err != nil {
							return err
						}
						ok, err := confirm(r.app.Stdin, c.ErrOrStderr(), fmt.Sprintf("%s %d failed job(s)%s?", a.name, n, describeFilter(f)))
						if err != nil {
							return err
						}
						if !ok {
							return errNotConfirmed
						}
					}
					n, err := a.all(svc, ctx, f)
					if err != nil {
						return err
					}
					if asJSON {
						return printJSON(out, map[string]int{a.verb: n})
					}
					fmt.Fprintf(out, "%s %d failed job(s)\n", a.verb, n)
					return nil
				}
				res, line, err := a.one(ctx, svc, id)
				if err != nil {
					return notFound(id, err)
				}
				if asJSON {
					return printJSON(out, res)
				}
				fmt.Fprintln(out, line)
				return nil
			})
		},
	}
	c.Flags().BoolVar(&all, "all", false, "act on every failed job (or those matching --search/--queue)")
	c.Flags().StringVar(&f.Search, "search", "", "with --all: match name, queue, payload or error")
	c.Flags().StringVar(&f.Queue, "queue", "", "with --all: only this queue")
	c.Flags().StringVar(&f.Tag, "tag", "", "with --all: only jobs with this tag")
	c.Flags().BoolVar(&yes, "yes", false, "with --all: do not ask for confirmation (required when stdin is not a terminal)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "list the failed jobs it would "+a.name+", and do nothing")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// dryRunFailed lists the failed jobs an action would touch: the one with
// id, or (id 0) every match of f.
func dryRunFailed(ctx context.Context, out io.Writer, svc *fleet.Service, action string, id int64, f fleet.FailedFilter, asJSON bool) error {
	var jobs []fleet.FailedJob
	if id != 0 {
		j, err := svc.FailedJob(ctx, id)
		if err != nil {
			return notFound(id, err)
		}
		jobs = []fleet.FailedJob{j}
	} else {
		var err error
		if jobs, err = svc.FailedJobs(ctx, f); err != nil {
			return err
		}
	}
	if asJSON {
		if jobs == nil {
			jobs = []fleet.FailedJob{}
		}
		return printJSON(out, map[string]any{"dry_run": true, "would_" + action: len(jobs), "jobs": jobs})
	}
	tw := table(out)
	fmt.Fprintln(tw, "ID\tJOB\tQUEUE\tNAME\tATTEMPTS\tFAILED AT\tERROR\t")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\t%s\t\n", j.ID, j.JobID, j.Queue, j.Name, j.Attempts,
			j.FailedAt.Format(time.DateTime), firstLine(j.Error, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "dry run: would %s %d failed job(s); nothing was changed\n", action, len(jobs))
	return nil
}

func (r *runner) retryCommand() *cobra.Command {
	return r.failedActionCommand(failedAction{
		use:   "fleet:retry ID | --all [--search S] [--queue Q] [--yes] [--dry-run]",
		short: "Dispatch failed jobs again with fresh attempts",
		verb:  "retried",
		name:  "retry",
		all:   (*fleet.Service).RetryAll,
		one: func(ctx context.Context, svc *fleet.Service, id int64) (any, string, error) {
			newID, err := svc.Retry(ctx, id)
			return map[string]int64{"failed_id": id, "job_id": newID},
				fmt.Sprintf("retried failed job %d as job %d", id, newID), err
		},
	})
}

func (r *runner) forgetCommand() *cobra.Command {
	return r.failedActionCommand(failedAction{
		use:   "fleet:forget ID | --all [--search S] [--queue Q] [--yes] [--dry-run]",
		short: "Delete failed jobs",
		verb:  "forgot",
		name:  "forget",
		all:   (*fleet.Service).ForgetAll,
		one: func(ctx context.Context, svc *fleet.Service, id int64) (any, string, error) {
			err := svc.Forget(ctx, id)
			return map[string]int64{"forgotten": id}, fmt.Sprintf("forgot failed job %d", id), err
		},
	})
}

func (r *runner) jobsCommand() *cobra.Command {
	var pending, completed, asJSON bool
	var p fleet.Page
	c := &cobra.Command{
		Use:   "fleet:jobs --pending | --completed [--queue Q] [--tag T] [--limit N]",
		Short: "List queued jobs (pending, delayed, limited, running) or completed ones",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if pending == completed {
				return usagef("give exactly one of --pending or --completed")
			}
			if err := checkPage(p.Limit, p.Offset); err != nil {
				return err
			}
			if err := checkQueueFilter(c, p.Queue); err != nil {
				return err
			}
			if err := checkTagFilter(c, p.Tag); err != nil {
				return err
			}
			if completed && p.Tag != "" {
				return usagef("--tag goes with --pending (completed attempts are filtered by queue only)")
			}
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				out := c.OutOrStdout()
				tw := table(out)
				if pending {
					jobs, err := svc.PendingJobs(c.Context(), p)
					if err != nil {
						return err
					}
					if asJSON {
						return printList(out, "jobs", jobs, cmp.Or(p.Limit, 50), max(p.Offset, 0))
					}
					fmt.Fprintln(tw, "ID\tQUEUE\tNAME\tSTATE\tPRIORITY\tATTEMPTS\tAVAILABLE AT\tTAGS\tPAYLOAD\t")
					for _, j := range jobs {
						fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t\n", j.ID, j.Queue, j.Name, j.State, j.Priority, j.Attempts,
							j.AvailableAt.Format(time.DateTime), clip(strings.Join(j.Tags, ","), 60), clip(string(j.Payload), 80))
					}
					return tw.Flush()
				}
				jobs, err := svc.CompletedJobs(c.Context(), p)
				if err != nil {
					return err
				}
				if asJSON {
					return printList(out, "attempts", jobs, cmp.Or(p.Limit, 50), max(p.Offset, 0))
				}
				fmt.Fprintln(tw, "JOB\tQUEUE\tNAME\tATTEMPT\tFINISHED AT\tRUNTIME\t")
				for _, j := range jobs {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%.1fms\t\n", j.JobID, j.Queue, j.Name, j.Attempt,
						j.FinishedAt.Format(time.DateTime), j.RuntimeMs)
				}
				return tw.Flush()
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&pending, "pending", false, "jobs not finished yet")
	fl.BoolVar(&completed, "completed", false, "completed jobs, newest first")
	fl.StringVar(&p.Queue, "queue", "", "only this queue (pending jobs of one queue are listed in the order they run)")
	fl.StringVar(&p.Tag, "tag", "", "with --pending: only jobs with this tag (exactly, e.g. tenant:42)")
	fl.IntVar(&p.Limit, "limit", 50, "at most N jobs")
	fl.IntVar(&p.Offset, "offset", 0, "skip the first N")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (r *runner) metricsCommand() *cobra.Command {
	var period, subject string
	var asJSON bool
	c := &cobra.Command{
		Use:   "fleet:metrics [--period hour|day|week] [--subject NAME]",
		Short: "Per-minute snapshots per queue and job name: throughput, runtime percentiles, wait",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := fleet.ParsePeriod(period)
			if err != nil {
				return fmt.Errorf("--period: %w", err)
			}
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				rows, err := svc.Metrics(c.Context(), p)
				if err != nil {
					return err
				}
				kept := rows[:0]
				for _, m := range rows {
					if subject == "" || m.Subject == subject {
						kept = append(kept, m)
					}
				}
				if asJSON {
					return printList(c.OutOrStdout(), "metrics", kept, 0, 0)
				}
				tw := table(c.OutOrStdout())
				fmt.Fprintln(tw, "AT\tKIND\tNAME\tJOBS\tFAILED\tJOBS/MIN\tP50\tP95\tP99\tMEAN\tWAIT\tPENDING\t")
				for _, m := range kept {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.0f\t%.1fms\t%.1fms\t%.1fms\t%.1fms\t%s\t%d\t\n",
						m.TakenAt.Local().Format("01-02 15:04"), m.Kind, m.Subject, m.Jobs, m.Failed, m.JobsPerMinute,
						m.RuntimeP50Ms, m.RuntimeP95Ms, m.RuntimeP99Ms, m.RuntimeMeanMs, secs(m.WaitSecs), m.Pending)
				}
				if len(kept) == 0 {
					fmt.Fprintln(tw, "(no snapshots yet: a running master writes one a minute)")
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().StringVar(&period, "period", "hour", "hour (per minute), day (per 15 minutes) or week (per hour)")
	c.Flags().StringVar(&subject, "subject", "", "only this queue or job name")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
