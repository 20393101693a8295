package cmd

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/queue"
)

func (r *runner) jobCommand() *cobra.Command {
	var failed, asJSON bool
	c := &cobra.Command{
		Use:   "fleet:job ID [--failed] [--json]",
		Short: "One job's whole story: its state now, every attempt, its retries (payload secrets redacted)",
		Long: "ID is a job id (the id dispatch prints, fleet:jobs' ID, fleet:failed's JOB column). " +
			"With --failed it is the id of a failed job instead (fleet:failed's ID column).",
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			what := "job"
			if failed {
				what = "failed job"
			}
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return usagef("ID %q is not a %s's id: it must be a positive whole number", args[0], what)
			}
			return r.withService(c.Context(), func(_ *config.Config, svc *fleet.Service) error {
				var story fleet.JobStory
				if failed {
					story, err = svc.FailedJobStory(c.Context(), id)
				} else {
					story, err = svc.Job(c.Context(), id)
				}
				switch {
				case errors.Is(err, fleet.ErrFailedJobNotFound):
					return notFoundf("no failed job with id %d (see fleet:failed)", id)
				case errors.Is(err, fleet.ErrJobNotFound):
					msg := fmt.Sprintf("no job with id %d: it is not queued, not failed and has no recorded attempt", id)
					if _, ferr := svc.FailedJob(c.Context(), id); ferr == nil {
						msg += fmt.Sprintf(" (there is a failed job %d: see fleet:job --failed %d)", id, id)
					}
					return &notFoundError{err: errors.New(msg)}
				case err != nil:
					return err
				}
				if asJSON {
					return printJSON(c.OutOrStdout(), story)
				}
				return printStory(c.OutOrStdout(), story)
			})
		},
	}
	c.Flags().BoolVar(&failed, "failed", false, "ID is a failed job's id (fleet:failed's ID), not a job id")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// printStory renders a job's story for people: a block, then the attempts.
func printStory(w io.Writer, s fleet.JobStory) error {
	tw := table(w)
	at := func(t time.Time) string {
		return fmt.Sprintf("%s (%s)", t.Local().Format(time.DateTime), ago(s.At, t))
	}
	fmt.Fprintf(tw, "job\t%d\n", s.ID)
	fmt.Fprintf(tw, "name\t%s\n", s.Name)
	fmt.Fprintf(tw, "queue\t%s\n", s.Queue)
	fmt.Fprintf(tw, "state\t%s\n", describeState(s, at))
	tries := strconv.Itoa(s.Tries)
	if s.MaxTries != nil {
		tries += " of " + strconv.Itoa(*s.MaxTries)
	}
	fmt.Fprintf(tw, "attempts\t%s\n", tries)
	if l := s.Limit; l != nil {
		line := fmt.Sprintf("key %q, at most %d at once", l.Key, l.Limit)
		if l.Active != nil {
			line += fmt.Sprintf(" (%d ready or running now)", *l.Active)
		}
		if l.Waiting {
			line += "; this job waits for a slot"
		}
		fmt.Fprintf(tw, "limit\t%s\n", line)
	}
	if s.CreatedAt != nil {
		fmt.Fprintf(tw, "created\t%s\n", at(*s.CreatedAt))
	}
	if s.RetryOf != nil {
		fmt.Fprintf(tw, "retry of\tjob %d (the first job of its retry chain)\n", *s.RetryOf)
	}
	if len(s.Retries) > 0 {
		var parts []string
		for _, l := range s.Retries {
			p := fmt.Sprintf("job %d (%s", l.JobID, l.State)
			if l.FailedID != nil {
				p += fmt.Sprintf(", failed job %d", *l.FailedID)
			}
			parts = append(parts, p+")")
		}
		fmt.Fprintf(tw, "retried as\t%s\n", strings.Join(parts, ", "))
	}
	if s.UniqueKey != "" {
		fmt.Fprintf(tw, "unique key\t%s\n", s.UniqueKey)
	}
	if s.Priority != nil && *s.Priority != queue.DefaultPriority {
		fmt.Fprintf(tw, "priority\t%d\n", *s.Priority)
	}
	if len(s.Tags) > 0 {
		fmt.Fprintf(tw, "tags\t%s\n", clip(strings.Join(s.Tags, ", "), 200))
	}
	if s.Metadata != nil {
		fmt.Fprintf(tw, "metadata\t%s\n", clip(string(s.Metadata), 200))
	}
	if s.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\n", firstLine(s.LastError, 200))
	}
	if s.Failed != nil {
		fmt.Fprintf(tw, "error\t%s\n", firstLine(s.Failed.Error, 200))
	}
	if c := s.Cancel; c != nil {
		fmt.Fprintf(tw, "cancelled\t%s\n", describeCancel(c, at))
	}
	if s.Payload != nil {
		fmt.Fprintf(tw, "payload\t%s\n", clip(string(s.Payload), 200))
	} else {
		fmt.Fprintf(tw, "payload\t(not kept once a job is neither queued nor failed)\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = table(w)
	fmt.Fprintln(tw, "ATTEMPT\tSTATUS\tWORKER\tMASTER\tRESERVED\tSTARTED\tFINISHED\tRUNTIME\tERROR\t")
	for _, a := range s.Attempts {
		reserved := "-"
		if a.ReservedAt != nil {
			reserved = a.ReservedAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1fms\t%s\t\n", a.Attempt, a.Status, dash(a.Worker),
			dash(masterLabel(a.Master, a.MasterInstance)), reserved, a.StartedAt.Local().Format(time.DateTime),
			a.FinishedAt.Local().Format(time.DateTime), a.RuntimeMs, firstLine(a.Error, 80))
	}
	if len(s.Attempts) == 0 {
		fmt.Fprintln(tw, "(no recorded attempt)")
	}
	return tw.Flush()
}

// describeState is the state line: "reserved by W of master M since T".
func describeState(s fleet.JobStory, at func(time.Time) string) string {
	switch s.State {
	case fleet.JobPending:
		if s.AvailableAt != nil {
			return "pending (available since " + at(*s.AvailableAt) + ")"
		}
	case fleet.JobDelayed:
		if s.AvailableAt != nil {
			return "delayed until " + s.AvailableAt.Local().Format(time.DateTime) + " (in " + s.AvailableAt.Sub(s.At).Round(time.Second).String() + ")"
		}
	case fleet.JobLimited:
		if s.AvailableAt != nil && s.Limit != nil {
			line := "limited: waiting for a slot of limit key " + strconv.Quote(s.Limit.Key)
			if s.AvailableAt.After(s.At) {
				return line + ", and not before " + s.AvailableAt.Local().Format(time.DateTime) + " (in " + s.AvailableAt.Sub(s.At).Round(time.Second).String() + ")"
			}
			return line + " since " + at(*s.AvailableAt)
		}
	case fleet.JobReserved:
		if r := s.Reserved; r != nil {
			line := "reserved by worker " + r.Worker
			switch {
			case r.MasterKind == "worker":
				line += " (no master: a worker run by hand)"
			case r.MasterInstance != "":
				line += " of master " + masterLabel(r.Master, r.MasterInstance)
			}
			if r.Since != nil {
				line += " since " + at(*r.Since)
			}
			return line
		}
	case fleet.JobFailed:
		if f := s.Failed; f != nil {
			return fmt.Sprintf("failed at %s after %d attempt(s) (failed job %d)", at(f.FailedAt), f.Attempts, f.ID)
		}
	case fleet.JobCompleted:
		if n := len(s.Attempts); n > 0 {
			return "completed at " + at(s.Attempts[n-1].FinishedAt)
		}
	case fleet.JobRetried:
		return "failed, then retried (below)"
	case fleet.JobCancelled:
		if n := len(s.Attempts); n > 0 {
			return "cancelled at " + at(s.Attempts[n-1].FinishedAt)
		}
	case fleet.JobGone:
		return "ended without completing; no longer queued or failed (retried, forgotten or trimmed)"
	}
	return s.State
}

// masterLabel is "name (instance)", the instance alone when the member's
// row is gone.
func masterLabel(name, instance string) string {
	switch {
	case instance == "":
		return ""
	case name == "" || name == instance:
		return instance
	}
	return name + " (" + instance + ")"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ago renders how long before now t was: "12s ago", "in 3s".
func ago(now, t time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		return "in " + (-d).String()
	}
	return d.String() + " ago"
}

// describeCancel is the cancelled line: who asked and when, for a request
// the worker has not acted on yet, else the cancelled attempt's reason.
func describeCancel(c *fleet.JobCancellation, at func(time.Time) string) string {
	if c.Requested {
		return fmt.Sprintf("requested by %s at %s; its worker is stopping it", c.By, at(c.At))
	}
	return fmt.Sprintf("at %s: %s", at(c.At), firstLine(c.Reason, 200))
}
