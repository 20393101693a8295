package cmd

import (
	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/queue"
)

// checkPage validates the --limit and --offset of a listing command, the
// same way on every command: --limit at least 1, --offset at least 0.
func checkPage(limit, offset int) error {
	if limit < 1 {
		return usagef("--limit must be at least 1, got %d", limit)
	}
	if offset < 0 {
		return usagef("--offset must be at least 0, got %d", offset)
	}
	return nil
}

// checkTagFilter validates a --tag that filters once it is given: the
// same rules as a job's tag.
func checkTagFilter(c *cobra.Command, tag string) error {
	if !c.Flags().Changed("tag") {
		return nil
	}
	return queue.CheckTags("--tag", []string{tag})
}

// checkQueueFilter validates a --queue that filters (empty: every queue)
// once it is given: the same rules as a queue's name.
func checkQueueFilter(c *cobra.Command, q string) error {
	if !c.Flags().Changed("queue") {
		return nil
	}
	return usage(queue.CheckQueue("--queue", q))
}
