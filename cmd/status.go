package cmd

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/process"
	"github.com/fleet-go/fleet/supervisor"
)

// printPaused writes what is paused, one line.
func printPaused(w io.Writer, p fleet.Paused) {
	var parts []string
	if p.All {
		parts = append(parts, "every supervisor")
	}
	if len(p.Supervisors) > 0 {
		parts = append(parts, "supervisors "+strings.Join(p.Supervisors, ", "))
	}
	if len(p.Queues) > 0 {
		parts = append(parts, "queues "+strings.Join(p.Queues, ", "))
	}
	if len(parts) == 0 {
		parts = []string{"nothing"}
	}
	fmt.Fprintf(w, "paused: %s\n", strings.Join(parts, "; "))
}

// warnUnworkedQueue writes a warning on stderr when no supervisor of this
// app's configuration works q. The pause is stored all the same: another
// host's configuration, or a later deploy, may work it.
func warnUnworkedQueue(c *cobra.Command, cfg *config.Config, q string) {
	sups, err := supervisor.Resolve(process.SupervisorOptions(cfg, false))
	if err != nil {
		return
	}
	var worked []string
	for _, s := range sups {
		if slices.Contains(s.Queues, q) {
			return
		}
		for _, name := range s.Queues {
			if !slices.Contains(worked, name) {
				worked = append(worked, name)
			}
		}
	}
	slices.Sort(worked)
	fmt.Fprintf(c.ErrOrStderr(), "warning: no supervisor in this app's configuration works queue %q (they work: %s); the pause is stored anyway and applies wherever the queue is worked\n",
		q, strings.Join(worked, ", "))
}
