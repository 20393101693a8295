package balancer_test

import (
	"fmt"
	"testing"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/supervisor"
)

// The master calls NextAllocation once per supervisor on every balancing
// step. These benchmarks time a small supervisor (2 queues) and a large one
// (50 queues, max_processes 200), under balance "auto" and "simple", from a
// cold start (nothing running) and from a steady state (running the
// previous step's allocation). Each checks its last result, so a broken
// benchmark fails instead of measuring nothing.

// benchSupervisor returns a supervisor resolved the way the master resolves
// its configuration, working queues q0…q(n-1).
func benchSupervisor(b *testing.B, balance supervisor.Balance, queues, minP, maxP, concurrency int) supervisor.Supervisor {
	b.Helper()
	names := make([]string, queues)
	for i := range names {
		names[i] = fmt.Sprintf("q%d", i)
	}
	sups, err := supervisor.Resolve(supervisor.Options{
		Supervisors: map[string]supervisor.SupervisorOptions{"bench": {
			Queues: names, Balance: string(balance),
			MinProcesses: &minP, MaxProcesses: &maxP, Concurrency: &concurrency,
		}},
		Driver: "database",
	})
	if err != nil {
		b.Fatal(err)
	}
	return sups[0]
}

// benchWorkload gives every queue of sup a workload: a mix of idle, light
// and heavy queues with different runtimes, so that under "auto" some
// queues are capped by their jobs and the rest share what is left.
func benchWorkload(sup supervisor.Supervisor) map[string]balancer.QueueWorkload {
	ws := make([]balancer.QueueWorkload, 0, len(sup.Queues))
	for i, q := range sup.Queues {
		var w balancer.QueueWorkload
		switch (i + 2) % 5 { // the first queues are busy
		case 0: // idle
			w = balancer.NewQueueWorkload(q, 0, 0, 0, 0)
		case 1: // a few short jobs
			w = balancer.NewQueueWorkload(q, 3+i, 1, 0.5, 40)
		case 2: // a backlog of medium jobs
			w = balancer.NewQueueWorkload(q, 400+17*i, 8, 95, 850)
		case 3: // few long jobs
			w = balancer.NewQueueWorkload(q, 6, 4, 30, 45_000)
		default: // no runtime yet: 1 s per job
			w = balancer.NewQueueWorkload(q, 120+i, 0, 12, 0)
		}
		ws = append(ws, w)
	}
	return loads(ws...)
}

func BenchmarkNextAllocation(b *testing.B) {
	const shift = 2
	for _, bc := range []struct {
		name                   string
		balance                supervisor.Balance
		queues, minP, maxP, cc int
	}{
		{"small/auto", supervisor.BalanceAuto, 2, 1, 8, 5},
		{"small/simple", supervisor.BalanceSimple, 2, 1, 8, 5},
		{"large/auto", supervisor.BalanceAuto, 50, 1, 200, 10},
		{"large/simple", supervisor.BalanceSimple, 50, 1, 200, 10},
	} {
		sup := benchSupervisor(b, bc.balance, bc.queues, bc.minP, bc.maxP, bc.cc)
		work := benchWorkload(sup)
		target := balancer.Target(sup, work)
		// Half-way between min_processes and the target: auto still moves.
		steady := balancer.Allocation{}
		for q, n := range target {
			steady[q] = (n + sup.MinProcesses) / 2
		}
		for _, start := range []struct {
			name    string
			current balancer.Allocation
		}{
			{"cold", balancer.Allocation{}},
			{"running", steady},
		} {
			b.Run(bc.name+"/"+start.name, func(b *testing.B) {
				b.ReportAllocs()
				var next balancer.Allocation
				for b.Loop() {
					next = balancer.NextAllocation(sup, start.current, work, shift, -1)
				}
				checkAllocation(b, sup, start.current, next, shift)
			})
		}
	}
}

func BenchmarkTarget(b *testing.B) {
	for _, bc := range []struct {
		name                   string
		queues, minP, maxP, cc int
	}{
		{"small", 2, 1, 8, 5},
		{"large", 50, 1, 200, 10},
	} {
		sup := benchSupervisor(b, supervisor.BalanceAuto, bc.queues, bc.minP, bc.maxP, bc.cc)
		work := benchWorkload(sup)
		b.Run(bc.name+"/auto", func(b *testing.B) {
			b.ReportAllocs()
			var target balancer.Allocation
			for b.Loop() {
				target = balancer.Target(sup, work)
			}
			if len(target) != len(sup.Queues) || target.Total() > sup.MaxProcesses {
				b.Fatalf("Target = %v: %d groups totalling %d, want %d groups totalling at most %d",
					target, len(target), target.Total(), len(sup.Queues), sup.MaxProcesses)
			}
		})
	}
}

// checkAllocation fails b unless next is a plausible step from current:
// one entry per group, every group within [min, max], the total at most
// max_processes, and under "auto" no group moving up by more than shift
// (beyond being raised to min_processes).
func checkAllocation(b *testing.B, sup supervisor.Supervisor, current, next balancer.Allocation, shift int) {
	b.Helper()
	groups := sup.Groups()
	if len(next) != len(groups) {
		b.Fatalf("NextAllocation = %v: %d groups, want %d", next, len(next), len(groups))
	}
	if t := next.Total(); t > sup.MaxProcesses || t < 1 {
		b.Fatalf("NextAllocation = %v: total %d, want 1…%d", next, t, sup.MaxProcesses)
	}
	for _, g := range groups {
		n, ok := next[g.Key]
		if !ok || n < 1 {
			b.Fatalf("NextAllocation = %v: group %q has %d processes", next, g.Key, n)
		}
		if sup.Balance == supervisor.BalanceAuto {
			if n < sup.MinProcesses {
				b.Fatalf("NextAllocation = %v: group %q below min_processes %d", next, g.Key, sup.MinProcesses)
			}
			if from := max(current[g.Key], sup.MinProcesses); n > from+shift {
				b.Fatalf("NextAllocation = %v: group %q moved from %d to %d, more than shift %d", next, g.Key, from, n, shift)
			}
		}
	}
}
