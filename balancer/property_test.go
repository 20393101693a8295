package balancer_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/supervisor"
)

// The property tests draw their cases from fixed seeds, so a failure is
// reproducible: the message names the seed and the case.

const propertyCases = 3000

// randomSupervisor returns a supervisor that supervisor.Resolve accepts.
func randomSupervisor(r *rand.Rand, balance supervisor.Balance) supervisor.Supervisor {
	n := 1 + r.IntN(6)
	queues := make([]string, n)
	for i := range queues {
		queues[i] = fmt.Sprintf("q%d", i)
	}
	r.Shuffle(n, func(i, j int) { queues[i], queues[j] = queues[j], queues[i] })
	minP := 1 + r.IntN(3)
	var maxP int
	switch balance {
	case supervisor.BalanceAuto:
		maxP = minP*n + r.IntN(20)
	case supervisor.BalanceSimple:
		maxP = n + r.IntN(20)
	default:
		maxP = 1 + r.IntN(20)
	}
	concurrency := 1 + r.IntN(8)
	only := []string{"s"}
	sups, err := supervisor.Resolve(supervisor.Options{
		Supervisors: map[string]supervisor.SupervisorOptions{"s": {
			Queues: queues, Balance: string(balance),
			MinProcesses: &minP, MaxProcesses: &maxP, Concurrency: &concurrency,
		}},
		Only:   only,
		Driver: "database",
	})
	if err != nil {
		panic(err)
	}
	return sups[0]
}

// randomBalance picks a balance, mostly auto.
func randomBalance(r *rand.Rand) supervisor.Balance {
	switch r.IntN(6) {
	case 0:
		return supervisor.BalanceSimple
	case 1:
		return supervisor.BalanceOff
	}
	return supervisor.BalanceAuto
}

// randomCurrent returns a current allocation: groups missing, at 0, below,
// at or above min, sometimes over max, and some stale keys.
func randomCurrent(r *rand.Rand, sup supervisor.Supervisor) balancer.Allocation {
	cur := balancer.Allocation{}
	for _, g := range sup.Groups() {
		if r.IntN(5) == 0 {
			continue
		}
		cur[g.Key] = r.IntN(sup.MaxProcesses + 3)
	}
	if r.IntN(4) == 0 {
		cur["stale"] = r.IntN(10)
	}
	return cur
}

// randomWorkload returns a workload: queues missing, idle, light or heavy,
// and sometimes a queue of another supervisor.
func randomWorkload(r *rand.Rand, sup supervisor.Supervisor) map[string]balancer.QueueWorkload {
	work := map[string]balancer.QueueWorkload{}
	for _, q := range sup.Queues {
		var w balancer.QueueWorkload
		switch r.IntN(4) {
		case 0:
			continue
		case 1:
			w = balancer.NewQueueWorkload(q, 0, 0, 0, 0)
		case 2:
			w = balancer.NewQueueWorkload(q, r.IntN(20), r.IntN(5), r.Float64()*10, float64(r.IntN(3))*r.Float64()*500)
		default:
			w = balancer.NewQueueWorkload(q, r.IntN(5000), r.IntN(50), r.Float64()*600, float64(r.IntN(2))*r.Float64()*10000)
		}
		work[q] = w
	}
	if r.IntN(5) == 0 {
		work["elsewhere"] = balancer.NewQueueWorkload("elsewhere", 100, 0, 0, 0)
	}
	return work
}

// reinsert rebuilds a map with its keys inserted in a shuffled order.
func reinsert[V any](r *rand.Rand, m map[string]V) map[string]V {
	if m == nil {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	out := make(map[string]V, len(m))
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

// capOf is the most processes Target may give queue q of an auto supervisor.
func capOf(sup supervisor.Supervisor, w balancer.QueueWorkload) int {
	active := w.Active()
	return max(sup.MinProcesses, (active+sup.Concurrency-1)/sup.Concurrency)
}

// checkShape checks that a has exactly one entry per group of sup, none
// negative, a total of at most max_processes, and every auto queue at
// min_processes or more.
func checkShape(t *testing.T, describe func() string, sup supervisor.Supervisor, a balancer.Allocation) {
	t.Helper()
	what := lazy(describe)
	groups := sup.Groups()
	if len(a) != len(groups) {
		t.Fatalf("%s: %v has %d entries, want one per group (%d)", what, a, len(a), len(groups))
	}
	for _, g := range groups {
		n, ok := a[g.Key]
		if !ok {
			t.Fatalf("%s: %v has no entry for group %q", what, a, g.Key)
		}
		if n < 0 {
			t.Fatalf("%s: %v: group %q is negative", what, a, g.Key)
		}
		if sup.Balance == supervisor.BalanceAuto && n < sup.MinProcesses {
			t.Fatalf("%s: %v: queue %q below min_processes %d", what, a, g.Key, sup.MinProcesses)
		}
		if sup.Balance == supervisor.BalanceSimple && n < 1 {
			t.Fatalf("%s: %v: queue %q has no process", what, a, g.Key)
		}
	}
	if total := a.Total(); total > sup.MaxProcesses {
		t.Fatalf("%s: %v totals %d > max_processes %d", what, a, total, sup.MaxProcesses)
	}
}

func TestPropertyNextAllocation(t *testing.T) {
	for seed := range uint64(3) {
		r := rand.New(rand.NewPCG(seed, seed))
		for c := range propertyCases {
			sup := randomSupervisor(r, randomBalance(r))
			cur := randomCurrent(r, sup)
			work := randomWorkload(r, sup)
			shift := r.IntN(6) - 1
			describe := func() string {
				return fmt.Sprintf("seed %d case %d: %+v current %v shift %d", seed, c, sup, cur, shift)
			}
			what := lazy(describe)

			next := balancer.NextAllocation(sup, cur, work, shift, -1)
			checkShape(t, describe, sup, next)

			// Determinism, whatever the maps' insertion order.
			for range 3 {
				again := balancer.NextAllocation(sup, reinsert(r, cur), reinsert(r, work), shift, -1)
				if !reflect.DeepEqual(again, next) {
					t.Fatalf("%s: NextAllocation = %v, then %v", what, next, again)
				}
			}

			target := balancer.Target(sup, work)
			checkShape(t, func() string { return describe() + " (target)" }, sup, target)
			if sup.Balance != supervisor.BalanceAuto {
				if !reflect.DeepEqual(next, target) {
					t.Fatalf("%s: %s NextAllocation = %v, want the target %v", what, sup.Balance, next, target)
				}
				if target.Total() != sup.MaxProcesses {
					t.Fatalf("%s: %s target %v does not use max_processes", what, sup.Balance, target)
				}
				continue
			}

			// Auto: the target uses what the queues can take and no queue
			// more than its cap.
			capTotal := 0
			for _, q := range sup.Queues {
				qcap := capOf(sup, work[q])
				if target[q] > qcap {
					t.Fatalf("%s: target %v gives %q more than its cap %d", what, target, q, qcap)
				}
				capTotal += qcap
			}
			if want := min(sup.MaxProcesses, capTotal); target.Total() != want {
				t.Fatalf("%s: target %v totals %d, want min(max, caps) = %d", what, target, target.Total(), want)
			}

			// Shift: when current (raised to min) fits in max_processes,
			// every queue moves by at most shift towards its target,
			// without passing it.
			step := max(shift, 1)
			fits := 0
			for _, q := range sup.Queues {
				fits += max(cur[q], sup.MinProcesses)
			}
			if fits > sup.MaxProcesses {
				continue
			}
			for _, q := range sup.Queues {
				from := max(cur[q], sup.MinProcesses)
				if d := next[q] - from; d > step || -d > step {
					t.Fatalf("%s: %q moved from %d to %d, more than shift", what, q, from, next[q])
				}
				if lo, hi := min(from, target[q]), max(from, target[q]); next[q] < lo || next[q] > hi {
					t.Fatalf("%s: %q moved from %d to %d, away from or past its target %d", what, q, from, next[q], target[q])
				}
			}
		}
	}
}

// With constant inputs, steps reach the target and stay there.
func TestPropertyConverges(t *testing.T) {
	for seed := range uint64(3) {
		r := rand.New(rand.NewPCG(seed, 100+seed))
		for c := range propertyCases {
			sup := randomSupervisor(r, randomBalance(r))
			cur := randomCurrent(r, sup)
			work := randomWorkload(r, sup)
			shift := 1 + r.IntN(4)
			describe := func() string {
				return fmt.Sprintf("seed %d case %d: %+v workload %v shift %d", seed, c, sup, work, shift)
			}
			what := lazy(describe)

			target := balancer.Target(sup, work)
			// Every step moves some queue at least one closer, so max ×
			// queues steps are plenty.
			limit := sup.MaxProcesses*len(sup.Queues) + 2
			steps := 0
			for ; !reflect.DeepEqual(cur, target); steps++ {
				if steps > limit {
					t.Fatalf("%s: not at target %v after %d steps: %v", what, target, steps, cur)
				}
				cur = balancer.NextAllocation(sup, cur, work, shift, -1)
				checkShape(t, describe, sup, cur)
			}
			for range 20 {
				if cur = balancer.NextAllocation(sup, cur, work, shift, -1); !reflect.DeepEqual(cur, target) {
					t.Fatalf("%s: left the target %v for %v", what, target, cur)
				}
			}
		}
	}
}

// A queue with a backlog, the others idle, grows from the start by shift
// per step to min(cap, max - min × (n-1)) and stays; the others stay at min.
func TestPropertyBacklog(t *testing.T) {
	for seed := range uint64(3) {
		r := rand.New(rand.NewPCG(seed, 200+seed))
		for c := range propertyCases {
			sup := randomSupervisor(r, supervisor.BalanceAuto)
			n := len(sup.Queues)
			busyQ := sup.Queues[r.IntN(n)]
			waiting := 1 + r.IntN(20)
			if r.IntN(2) == 0 {
				waiting = 10_000 + r.IntN(1_000_000)
			}
			work := map[string]balancer.QueueWorkload{busyQ: busy(busyQ, waiting)}
			for _, q := range sup.Queues {
				if q != busyQ && r.IntN(2) == 0 {
					work[q] = balancer.NewQueueWorkload(q, 0, 0, 0, 0)
				}
			}
			shift := 1 + r.IntN(4)
			qcap := capOf(sup, work[busyQ])
			want := min(qcap, sup.MaxProcesses-sup.MinProcesses*(n-1))
			describe := func() string {
				return fmt.Sprintf("seed %d case %d: %+v busy %q waiting %d shift %d", seed, c, sup, busyQ, waiting, shift)
			}
			what := lazy(describe)

			var cur balancer.Allocation
			prev := sup.MinProcesses
			for step := 0; step < sup.MaxProcesses+20; step++ {
				cur = balancer.NextAllocation(sup, cur, work, shift, -1)
				checkShape(t, describe, sup, cur)
				if got, exp := cur[busyQ], min(prev+shift, want); got != exp {
					t.Fatalf("%s: step %d: busy queue at %d, want %d (%v)", what, step+1, got, exp, cur)
				}
				prev = cur[busyQ]
				for _, q := range sup.Queues {
					if q != busyQ && cur[q] != sup.MinProcesses {
						t.Fatalf("%s: step %d: idle queue %q at %d, want min %d", what, step+1, q, cur[q], sup.MinProcesses)
					}
				}
			}
		}
	}
}

// lazy formats a case's description only when a check fails.
type lazy func() string

func (l lazy) String() string { return l() }
