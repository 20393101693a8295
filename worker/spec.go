package worker

import (
	"cmp"
	"log/slog"

	"github.com/fleet-go/fleet/spawner"
)

// SpecConfig is the Config of the worker spec asks for: base, which holds
// what a spec does not say (the poll interval, the timeout grace, the
// logger, the configuration's job defaults), with the spec over it. It is
// the one translation of a spec into a worker: the in-process spawner uses
// it, and `app fleet:work` reads its flags into a spec (the inverse of
// spawner.WorkArgs) and goes through it too.
//
// The spec's queues, concurrency, job defaults (Tries, Backoff, Timeout)
// and byte budget replace base's when the spec sets them (non-zero,
// non-empty);
// its limits, pause state, worker name and master always do, since a spec
// that sets none asks for none. A spec's supervisor is added to the
// logger, base.Logger or else slog.Default(), as the attribute
// "supervisor". MaxConns, the size of a process's connection pool, is no
// part of a worker's Config.
func SpecConfig(spec spawner.Spec, base Config) Config {
	cfg := base
	if len(spec.Queues) > 0 {
		cfg.Queues = spec.Queues
	}
	cfg.Concurrency = cmp.Or(spec.Concurrency, base.Concurrency)
	cfg.MaxJobs = spec.MaxJobs
	cfg.MaxTime = spec.MaxTime
	cfg.MaxMemoryMB = spec.MaxMemoryMB
	cfg.Paused = spec.Paused
	cfg.PausedQueues = spec.PausedQueues
	cfg.Name = spec.Worker
	cfg.Master = spec.Master
	cfg.MasterTTL = spec.MasterTTL
	cfg.Isolate = spec.Isolate
	if spec.Tries > 0 {
		cfg.Tries = spec.Tries
	}
	if len(spec.Backoff) > 0 {
		cfg.Backoff = spec.Backoff
	}
	if spec.Timeout > 0 {
		cfg.DefaultTimeout = spec.Timeout
	}
	if spec.PayloadBudget != 0 {
		cfg.PayloadBudget = spec.PayloadBudget
	}
	if spec.Supervisor != "" {
		cfg.Logger = cmp.Or(base.Logger, slog.Default()).With("supervisor", spec.Supervisor)
	}
	return cfg
}
