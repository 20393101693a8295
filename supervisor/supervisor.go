// Package supervisor resolves the [fleet.supervisors.NAME] tables of the
// configuration into the supervisors a fleet master runs on this host, and
// enforces the rules a supervisor must satisfy before the master boots.
//
// A supervisor owns a list of queues, in priority order (first queue first),
// and a number of worker processes spread over them in process groups; how
// many processes each group gets is decided by package balancer.
//
// The package is pure: it does no I/O, reads no clock and keeps no global
// state, so the same Options always resolve to the same result.
package supervisor

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Balance is a supervisor's balancing strategy.
type Balance string

const (
	// BalanceAuto gives every queue min_processes and spreads the rest of
	// max_processes over the queues in proportion to their workload.
	BalanceAuto Balance = "auto"
	// BalanceSimple splits max_processes evenly over the queues; the
	// remainder goes to the first queues.
	BalanceSimple Balance = "simple"
	// BalanceOff runs max_processes processes that all work every queue,
	// in priority order.
	BalanceOff Balance = "off"
)

// Defaults applied by Resolve to unset options.
const (
	// DefaultName is the name of the supervisor Resolve returns when none is
	// configured.
	DefaultName = "default"
	// DefaultBalance is the balance of a supervisor that sets none.
	DefaultBalance = BalanceAuto
	// DefaultMinProcesses is min_processes when unset.
	DefaultMinProcesses = 1
	// DefaultMaxProcesses is max_processes when unset.
	DefaultMaxProcesses = 4
)

// SupervisorOptions mirrors one [fleet.supervisors.NAME] TOML table; pointer
// fields are nil when unset.
type SupervisorOptions struct {
	// Queues lists the queues in priority order. It is required.
	Queues []string
	// Balance is "auto", "simple" or "off"; empty means "auto".
	Balance string
	// MinProcesses is the least number of processes per queue under
	// balance "auto" (default 1).
	MinProcesses *int
	// MaxProcesses is the most processes of the whole supervisor (default 4).
	MaxProcesses *int
	// FleetMaxProcesses caps the supervisor's processes summed over every
	// master that runs it (unset: no fleet-wide cap).
	FleetMaxProcesses *int
	// Concurrency is the number of jobs one process runs at once
	// (default Options.DefaultConcurrency).
	Concurrency *int
	// MaxJobs makes a process exit after starting that many jobs; 0: never.
	MaxJobs int
	// MaxMemoryMB makes a process exit above that resident memory; 0: never.
	MaxMemoryMB int
	// MaxTimeSecs makes a process exit after running that long; 0: never.
	MaxTimeSecs int
	// Tries overrides the jobs' number of attempts when set.
	Tries *int
	// Backoff overrides the jobs' retry delays, in seconds, when set.
	Backoff []int
	// TimeoutSecs overrides the jobs' timeout when set.
	TimeoutSecs *int
	// PayloadBudgetBytes overrides the processes' byte budget
	// (queue.payload_budget_bytes) when set; 0: no bound.
	PayloadBudgetBytes *int
}

// Options is what Resolve needs from the configuration.
type Options struct {
	// Supervisors maps a supervisor's name to its table (fleet.supervisors);
	// it may be empty.
	Supervisors map[string]SupervisorOptions
	// Only restricts this host to these supervisors (fleet.only); empty
	// means all of them.
	Only []string
	// DefaultQueues is queue.queues, worked by the implicit "default"
	// supervisor; when empty, []string{DefaultQueue} is used.
	DefaultQueues []string
	// DefaultQueue is queue.default_queue.
	DefaultQueue string
	// DefaultConcurrency is queue.workers, the default concurrency.
	DefaultConcurrency int
	// Driver is queue.driver; the master needs "database". Empty is taken
	// as unset (the configuration's default, "database").
	Driver string
	// CheckQueue, when set, applies the rules of a dispatched queue name
	// (queue.CheckQueue) to every queue of every supervisor, so that a
	// name the workers cannot be given (a comma, a control character, an
	// overlong one) fails at boot, naming its key, rather than leaving the
	// queue unworked. Its error is quoted after the key.
	CheckQueue func(queue string) error
}

// Supervisor is one resolved supervisor: every default applied and every
// rule checked.
type Supervisor struct {
	// Name is the table's NAME; letters, digits, '-' and '_' only.
	Name string
	// Queues lists the queues in priority order, at least one, no duplicates.
	Queues []string
	// Balance is the balancing strategy.
	Balance Balance
	// MinProcesses is the least number of processes per queue (auto),
	// default 1.
	MinProcesses int
	// MaxProcesses is the most processes of the whole supervisor, default 4.
	MaxProcesses int
	// FleetMaxProcesses is the most processes of the supervisor across
	// every master running it (0: no such budget). Each master runs at
	// most its share of it; see package master.
	FleetMaxProcesses int
	// Concurrency is the number of jobs one process runs at once, default
	// Options.DefaultConcurrency.
	Concurrency int
	// MaxJobs is the number of jobs after which a process exits; 0: never.
	MaxJobs int
	// MaxMemoryMB is the resident memory above which a process exits;
	// 0: never.
	MaxMemoryMB int
	// MaxTime is how long a process runs before it exits; 0: never.
	MaxTime time.Duration
	// Tries overrides the jobs' attempts; 0: not set (queue defaults apply).
	Tries int
	// Backoff overrides the jobs' retry delays in seconds; nil: not set.
	Backoff []int
	// Timeout overrides the jobs' timeout; 0: not set.
	Timeout time.Duration
	// PayloadBudget overrides the processes' byte budget, in bytes, as
	// spawner.Spec.PayloadBudget says it: 0 not set, negative no bound.
	PayloadBudget int64
}

// Group is one process group of a supervisor: processes of a group work the
// group's queues, in order.
type Group struct {
	// Key names the group in an allocation: the queue's name, or under
	// balance "off" the queues joined with ",".
	Key string
	// Queues are the queues the group's processes work, in priority order.
	Queues []string
}

// Groups returns the supervisor's process groups. Balance "auto" and
// "simple" have one group per queue, keyed by the queue's name, in priority
// order; "off" has one group whose key is the queues joined with "," in
// priority order (e.g. "exports,default"). A supervisor without queues has
// no groups. A Balance other than "simple" or "off" is treated as "auto".
func (s Supervisor) Groups() []Group {
	if len(s.Queues) == 0 {
		return nil
	}
	if s.Balance == BalanceOff {
		return []Group{{Key: strings.Join(s.Queues, ","), Queues: slices.Clone(s.Queues)}}
	}
	groups := make([]Group, len(s.Queues))
	for i, q := range s.Queues {
		groups[i] = Group{Key: q, Queues: []string{q}}
	}
	return groups
}

// Resolve returns the supervisors this host runs, sorted by name. With no
// supervisor configured, one named "default" works DefaultQueues. A non-empty
// Only keeps just the supervisors it names.
//
// Every supervisor is checked, including those Only leaves out (the
// configuration is shared by every host). All problems are reported
// together, joined with errors.Join; each line starts with the key it is
// about, e.g.
//
//	fleet.supervisors.default: balance "auto" needs min_processes × queues ≤ max_processes (1 × 5 > 4)
//
// On error Resolve returns no supervisors.
func Resolve(o Options) ([]Supervisor, error) {
	var errs []error
	if o.Driver != "" && o.Driver != "database" {
		errs = append(errs, fmt.Errorf(`queue.driver: the fleet master needs the "database" driver, got %q`, o.Driver))
	}

	tables := o.Supervisors
	implicit := len(tables) == 0
	if implicit {
		queues := o.DefaultQueues
		if len(queues) == 0 {
			queues = []string{o.DefaultQueue}
		}
		tables = map[string]SupervisorOptions{DefaultName: {Queues: queues}}
	}
	names := make([]string, 0, len(tables))
	for name := range tables {
		names = append(names, name)
	}
	slices.Sort(names)

	all := make([]Supervisor, 0, len(names))
	for _, name := range names {
		s, serrs := resolveOne(name, tables[name], o.DefaultConcurrency, implicit, o.CheckQueue)
		errs = append(errs, serrs...)
		all = append(all, s)
	}

	run := all
	if len(o.Only) > 0 {
		run = nil
		seen := make(map[string]bool, len(o.Only))
		for _, name := range o.Only {
			if seen[name] {
				continue
			}
			seen[name] = true
			if _, ok := tables[name]; !ok {
				errs = append(errs, fmt.Errorf("fleet.only: no supervisor named %q (have: %s)", name, strings.Join(names, ", ")))
			}
		}
		for _, s := range all {
			if seen[s.Name] {
				run = append(run, s)
			}
		}
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return run, nil
}

// resolveOne applies the defaults to one table and checks its rules.
// implicit says the table is the "default" supervisor made up from
// queue.queues, which the queue errors then mention.
func resolveOne(name string, t SupervisorOptions, defaultConcurrency int, implicit bool, checkQueue func(string) error) (Supervisor, []error) {
	key := tableKey(name)
	var errs []error
	fail := func(k, format string, args ...any) {
		errs = append(errs, errors.New(k+": "+fmt.Sprintf(format, args...)))
	}

	if !validName(name) {
		fail(key, "name must be non-empty and contain only letters, digits, '-' and '_'")
	}

	// Queues.
	from := ""
	if implicit {
		from = " (from queue.queues)"
	}
	queuesOK := true
	if len(t.Queues) == 0 {
		queuesOK = false
		fail(key+".queues", "must list at least one queue%s", from)
	}
	first := make(map[string]int, len(t.Queues))
	for i, q := range t.Queues {
		qkey := fmt.Sprintf("%s.queues[%d]", key, i)
		if strings.TrimSpace(q) == "" {
			queuesOK = false
			fail(qkey, "must not be empty%s", from)
			continue
		}
		if checkQueue != nil {
			if err := checkQueue(q); err != nil {
				queuesOK = false
				fail(qkey, "%v%s", err, from)
				continue
			}
		}
		if j, dup := first[q]; dup {
			queuesOK = false
			fail(qkey, "duplicate queue %q (also queues[%d])%s", q, j, from)
			continue
		}
		first[q] = i
	}

	// Balance.
	balance := Balance(t.Balance)
	balanceOK := true
	switch balance {
	case "":
		balance = DefaultBalance
	case BalanceAuto, BalanceSimple, BalanceOff:
	default:
		balanceOK = false
		fail(key+".balance", "must be %s, %s or %s, got %q", BalanceAuto, BalanceSimple, BalanceOff, t.Balance)
	}

	// Process counts.
	minP := intOr(t.MinProcesses, DefaultMinProcesses)
	maxP := intOr(t.MaxProcesses, DefaultMaxProcesses)
	minOK, maxOK := true, true
	switch {
	case balanceOK && balance == BalanceAuto && minP < 1:
		minOK = false
		fail(key+".min_processes", "must be at least 1 under balance %q, got %d", BalanceAuto, minP)
	case minP < 0:
		minOK = false
		fail(key+".min_processes", "must be at least 0, got %d", minP)
	}
	if maxP < 1 {
		maxOK = false
		fail(key+".max_processes", "must be at least 1, got %d", maxP)
	}
	concurrency := intOr(t.Concurrency, defaultConcurrency)
	if concurrency < 1 {
		if t.Concurrency == nil {
			fail(key+".concurrency", "must be at least 1, got %d (from queue.workers)", concurrency)
		} else {
			fail(key+".concurrency", "must be at least 1, got %d", concurrency)
		}
	}

	// The balance's rule, checked only when its inputs are valid so that one
	// mistake is reported once.
	if balanceOK && queuesOK && minOK && maxOK {
		n := len(t.Queues)
		switch balance {
		case BalanceAuto:
			if minP > maxP/n { // minP × n > maxP, without overflow
				fail(key, "balance %q needs min_processes × queues ≤ max_processes (%d × %d > %d)", BalanceAuto, minP, n, maxP)
			}
		case BalanceSimple:
			if maxP < n {
				fail(key, "balance %q needs max_processes ≥ queues (%d < %d)", BalanceSimple, maxP, n)
			}
		}
	}

	// Worker limits and job overrides.
	for _, l := range []struct {
		name string
		v    int
	}{{"max_jobs", t.MaxJobs}, {"max_memory_mb", t.MaxMemoryMB}, {"max_time_secs", t.MaxTimeSecs}} {
		if l.v < 0 {
			fail(key+"."+l.name, "must be at least 0, got %d", l.v)
		}
	}
	if t.Tries != nil && *t.Tries < 1 {
		fail(key+".tries", "must be at least 1, got %d", *t.Tries)
	}
	for i, secs := range t.Backoff {
		if secs < 0 {
			fail(fmt.Sprintf("%s.backoff[%d]", key, i), "must be at least 0, got %d", secs)
		}
	}
	if t.TimeoutSecs != nil && *t.TimeoutSecs < 1 {
		fail(key+".timeout_secs", "must be at least 1, got %d", *t.TimeoutSecs)
	}
	var budget int64
	if b := t.PayloadBudgetBytes; b != nil {
		switch {
		case *b < 0:
			fail(key+".payload_budget_bytes", "must be at least 0 (0: no bound), got %d", *b)
		case *b == 0:
			budget = -1
		default:
			budget = int64(*b)
		}
	}
	if t.FleetMaxProcesses != nil && *t.FleetMaxProcesses < 1 {
		fail(key+".fleet_max_processes", "must be at least 1, got %d", *t.FleetMaxProcesses)
	}

	return Supervisor{
		Name:              name,
		FleetMaxProcesses: intOr(t.FleetMaxProcesses, 0),
		Queues:            slices.Clone(t.Queues),
		Balance:           balance,
		MinProcesses:      minP,
		MaxProcesses:      maxP,
		Concurrency:       concurrency,
		MaxJobs:           t.MaxJobs,
		MaxMemoryMB:       t.MaxMemoryMB,
		MaxTime:           time.Duration(t.MaxTimeSecs) * time.Second,
		Tries:             intOr(t.Tries, 0),
		Backoff:           slices.Clone(t.Backoff),
		Timeout:           time.Duration(intOr(t.TimeoutSecs, 0)) * time.Second,
		PayloadBudget:     budget,
	}, errs
}

// tableKey is the key path of a supervisor's table. A name that is not a
// valid supervisor name is quoted, as TOML would need it to be.
func tableKey(name string) string {
	if validName(name) {
		return "fleet.supervisors." + name
	}
	return fmt.Sprintf("fleet.supervisors.%q", name)
}

// validName says whether name is non-empty and made of ASCII letters,
// digits, '-' and '_' only.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '_':
		default:
			return false
		}
	}
	return true
}

// intOr returns *p, or def when p is nil.
func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}
