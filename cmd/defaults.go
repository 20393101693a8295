package cmd

import (
	"time"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/queue"
)

// clientDefaults turns the queue section into dispatch defaults.
func clientDefaults(cfg *config.Config) queue.Defaults {
	return queue.Defaults{
		Queue:   cfg.Queue.DefaultQueue,
		Tries:   cfg.Queue.Tries,
		Backoff: cfg.Queue.Backoff,
		Timeout: time.Duration(cfg.Queue.TimeoutSecs) * time.Second,
	}
}
