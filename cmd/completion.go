package cmd

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/process"
	"github.com/fleet-go/fleet/supervisor"
)

// completeNames makes the shell complete supervisor and queue names, read
// from this app's configuration (no database is asked): the SUPERVISOR
// argument of fleet:pause and fleet:continue, and every --queue flag (the
// comma-separated list of fleet:work too). Cobra's `app completion bash|zsh|
// fish|powershell` prints the script that uses it.
func (r *runner) completeNames(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("queue") != nil {
			_ = c.RegisterFlagCompletionFunc("queue", r.completeQueues)
		}
		switch c.Name() {
		case "fleet:pause", "fleet:continue":
			c.ValidArgsFunction = r.completeSupervisors
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// configuredNames returns the supervisors of this app's configuration and
// the queues they, queue.queues and queue.default_queue name, each sorted.
func (r *runner) configuredNames() (sups, queues []string) {
	cfg, err := r.loadConfig()
	if err != nil {
		return nil, nil
	}
	queues = append(queues, cfg.Queue.Queues...)
	if cfg.Queue.DefaultQueue != "" {
		queues = append(queues, cfg.Queue.DefaultQueue)
	}
	if resolved, err := supervisor.Resolve(process.SupervisorOptions(cfg, false)); err == nil {
		for _, s := range resolved {
			sups = append(sups, s.Name)
			queues = append(queues, s.Queues...)
		}
	}
	slices.Sort(sups)
	slices.Sort(queues)
	return slices.Compact(sups), slices.Compact(queues)
}

func (r *runner) completeSupervisors(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	sups, _ := r.configuredNames()
	return withPrefix(sups, "", toComplete), cobra.ShellCompDirectiveNoFileComp
}

func (r *runner) completeQueues(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	_, queues := r.configuredNames()
	// A list (fleet:work --queue a,b): complete its last name, keeping the
	// ones before and leaving out those already given.
	done, last := "", toComplete
	if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
		done, last = toComplete[:i+1], toComplete[i+1:]
		given := strings.Split(toComplete[:i], ",")
		queues = slices.DeleteFunc(queues, func(q string) bool { return slices.Contains(given, q) })
	}
	return withPrefix(queues, done, last), cobra.ShellCompDirectiveNoFileComp
}

// withPrefix returns done+name for each name starting with prefix.
func withPrefix(names []string, done, prefix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, done+n)
		}
	}
	return out
}
