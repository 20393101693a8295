package cmd

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/queue"
)

// periodicSchedules builds the app's periodic schedules: those of
// [fleet.periodic] and those registered in jobs (queue.Registry's
// Periodic), by name. What config.Validate left to it is checked here: the
// cron expression, the job's name and its handler in jobs, the queue's
// name; each error names fleet.periodic.NAME and the key. The registry
// checks its own (queue.Registry.PeriodicSchedules), its errors naming
// Periodic("NAME"). A name declared by both is refused, naming both. All
// errors are joined.
func periodicSchedules(cfg *config.Config, jobs *queue.Registry) ([]periodic.Schedule, error) {
	defaults := clientDefaults(cfg)
	var out []periodic.Schedule
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(cfg.Fleet.Periodic)) {
		p := cfg.Fleet.Periodic[name]
		key := func(k string) string { return config.PeriodicKey(name, k) }
		loc := time.UTC
		if p.Timezone != "" {
			l, err := time.LoadLocation(p.Timezone)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: unknown time zone %q: %w", key("timezone"), p.Timezone, err))
				continue
			}
			loc = l
		}
		spec, err := periodic.Parse(p.Cron, loc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key("cron"), err))
		}
		if err := queue.CheckName(key("job"), p.Job); err != nil {
			errs = append(errs, err)
		} else if _, ok := jobs.Lookup(p.Job); !ok {
			errs = append(errs, fmt.Errorf("%s: no handler is registered for job %q (register it in the app's cmd.App.Jobs; registered: %s)",
				key("job"), p.Job, strings.Join(jobs.Names(), ", ")))
		}
		q := cmp.Or(p.Queue, cfg.Queue.DefaultQueue)
		label := key("queue")
		if p.Queue == "" {
			label = "queue.default_queue"
		}
		if err := queue.CheckQueue(label, q); err != nil {
			errs = append(errs, err)
		}
		mode := periodic.CatchUpNone
		if p.CatchUp != "" {
			if mode, err = periodic.ParseCatchUp(p.CatchUp); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", key("catch_up"), err))
			}
		}
		maxMissed := config.PeriodicCatchUpMaxDefault
		if p.CatchUpMax != nil {
			maxMissed = *p.CatchUpMax
		}
		payload := json.RawMessage(cmp.Or(p.Payload, "{}"))
		// The job takes its [queue.limits] as a dispatch of it would.
		limitKey, limit := defaults.LimitFor(p.Job)
		out = append(out, periodic.Schedule{
			Name: name, Source: periodic.SourceConfig, Spec: spec, Job: p.Job, Queue: q, Payload: payload, TickKey: p.TickKey,
			CatchUp: mode, CatchUpMax: maxMissed, JobOpts: periodic.JobOpts{LimitKey: limitKey, Limit: limit},
		})
	}
	code, err := jobs.PeriodicSchedules(defaults)
	if err != nil {
		errs = append(errs, err)
	}
	for _, s := range code {
		if _, ok := cfg.Fleet.Periodic[s.Name]; ok {
			errs = append(errs, fmt.Errorf("periodic schedule %q is declared twice, by %s in the configuration and by Periodic(%q) in the app's code: rename one",
				s.Name, config.PeriodicKey(s.Name, ""), s.Name))
			continue
		}
		out = append(out, s)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b periodic.Schedule) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (r *runner) periodicCommand() *cobra.Command {
	var asJSON bool
	var recent int
	c := &cobra.Command{
		Use:   "fleet:periodic [--json] [--recent N]",
		Short: "List the periodic schedules, of the configuration and of the code: cron, time zone, job, next tick, last tick and the job it made",
		Long: "Each periodic schedule of this app, a [fleet.periodic.NAME] of its configuration (source config) or " +
			"one its code registers with jobs.Periodic (source code), by name; then any schedule the database " +
			"knows that the app does not. Times are in each schedule's time zone; the next tick is " +
			"computed on the database clock. DUE SINCE names a tick that came due and that no master has " +
			"dispatched or skipped yet: no master is running the schedule.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if recent < 0 {
				return usagef("--recent must be at least 0, got %d", recent)
			}
			cfg, err := r.loadConfig()
			if err != nil {
				return err
			}
			schedules, err := periodicSchedules(cfg, r.app.Jobs)
			if err != nil {
				return err
			}
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				v, err := svc.Periodic(c.Context(), schedules, recent)
				if err != nil {
					return err
				}
				out := c.OutOrStdout()
				if asJSON {
					return printJSON(out, v)
				}
				tw := table(out)
				fmt.Fprintln(tw, "NAME\tSOURCE\tCRON\tTIMEZONE\tJOB\tQUEUE\tCATCH UP\tNEXT TICK\tLAST TICK\tLAST JOB\tDUE SINCE\t")
				for _, p := range v.Schedules {
					name, source, cron, tz, job, q, mode := p.Name, p.Source, p.Cron, p.Timezone, p.Job, p.Queue, p.CatchUp
					if !p.Configured {
						name, source, cron, tz, job, q, mode = p.Name+" (not configured)", "-", "-", "-", "-", "-", "-"
					}
					if p.CatchUpMax > 0 {
						mode += fmt.Sprintf(" (max %d)", p.CatchUpMax)
					}
					lastJob := "-"
					if p.LastJobID != nil {
						lastJob = strconv.FormatInt(*p.LastJobID, 10)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, source, cron, tz, job, q, mode,
						stamp(p.NextTick), stamp(p.LastTick), lastJob, stamp(p.DueSince))
				}
				if len(v.Schedules) == 0 {
					fmt.Fprintln(tw, "(no periodic schedule: add [fleet.periodic.NAME] tables to the configuration, or register them with jobs.Periodic)")
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				for _, p := range v.Schedules {
					if len(p.Recent) == 0 {
						continue
					}
					fmt.Fprintf(out, "\nlatest ticks of %s:\n", p.Name)
					tw := table(out)
					for _, t := range p.Recent {
						fmt.Fprintf(tw, "  %s\tjob %d\tdispatched %s\t\n", t.Tick.Format(time.RFC3339), t.JobID, t.DispatchedAt.Format(time.RFC3339))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().IntVar(&recent, "recent", 0, "also list each schedule's latest N dispatched ticks and their jobs (JSON: recent_ticks)")
	return c
}

// stamp renders an optional time for a table: RFC 3339 in its own zone,
// or -.
func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}
