package cmd

import (
	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/queue"
)

// clientDefaults turns the queue section into dispatch defaults. Tries,
// backoff and timeout are left to the worker that runs a job, so a
// supervisor's defaults apply to jobs that set none; [queue.limits]
// applies to jobs that set no limit of their own.
func clientDefaults(cfg *config.Config) queue.Defaults {
	return queue.Defaults{Queue: cfg.Queue.DefaultQueue, MaxPayloadBytes: cfg.Queue.MaxPayloadBytes, Limits: cfg.Queue.Limits}
}
