package master

import (
	"maps"
	"slices"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/membership"
	"github.com/fleet-go/fleet/store"
)

// The balancing of supervision: its allocations and its share of a
// fleet-wide budget. Like the rest of supervision, it runs on the
// supervision goroutine only.

// applyBudgets recomputes, for each supervisor with a fleet-wide budget,
// the ceiling of this master from its view: its Share of the budget over
// the live masters running the supervisor, and no more than the budget
// minus what the others run or have claimed. The ceiling it may grow to is
// the smaller of that and the claim in its own row of the view (what the
// beat that read the view wrote, so what any later view of the others
// holds), so two masters that grow at once never both take the same room.
// A drop applies at once.
func (s *supervision) applyBudgets() {
	shrink := false
	view := s.member.View()
	instance := s.member.Instance()
	for _, ss := range s.sups {
		n := ss.sup.FleetMaxProcesses
		if n <= 0 {
			continue
		}
		members := []store.Member{{Instance: instance}}
		others := 0
		for _, mem := range view.Live(store.KindMaster) {
			if mem.Instance == instance {
				continue
			}
			row, ok := reportedSup(mem.Report, ss.sup.Name)
			if !ok {
				continue
			}
			members = append(members, mem)
			others += max(row.Running, derefOr(row.Claim, 0))
		}
		computed := max(0, min(membership.Share(ss.sup.Name, n, members, instance), n-others))
		// The claim others can see now is the one in this master's own
		// row of the view: written by the very beat that read the view.
		prev := 0
		if me, ok := view.Find(instance); ok {
			if row, ok := reportedSup(me.Report, ss.sup.Name); ok {
				prev = derefOr(row.Claim, 0)
			}
		}
		ss.claim = computed
		next := min(prev, computed)
		if next != ss.ceiling {
			s.log.Info("fleet-wide budget", "supervisor", ss.sup.Name, "fleet_max_processes", n,
				"masters", len(members), "ceiling", next)
		}
		ss.ceiling = next
		shrink = shrink || ss.alloc.Total() > ss.ceiling
	}
	if shrink {
		s.rebalance() // at once, not at the next cooldown
	}
}

func derefOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// rebalance computes each supervisor's next allocation from the latest
// workload and its ceiling.
func (s *supervision) rebalance() {
	s.lastBal = s.now()
	for _, ss := range s.sups {
		current := balancer.Allocation{}
		for _, g := range ss.groups {
			current[g.Key] = s.alive(ss, g.Key)
		}
		next := balancer.NextAllocation(ss.sup, current, balanceWorkload(s.load, ss.sup.Queues, ss.paused, s.pausedQueues),
			s.set.BalanceMaxShift, ss.ceiling)
		if !maps.Equal(next, ss.alloc) {
			s.log.Info("allocation", "supervisor", ss.sup.Name, "processes", next)
		}
		ss.alloc = next
	}
	s.sig.rebalanced.Send(struct{}{})
}

// balanceWorkload is the workload a supervisor is balanced by: a queue
// that is paused, by itself or with its whole supervisor, counts as idle,
// whatever its backlog. Under balance "auto" it then keeps its
// min_processes only, and the spare processes go to the queues that can
// work; "simple" and "off" do not weigh workloads, so for them nothing
// changes. workload is not modified.
func balanceWorkload(workload map[string]balancer.QueueWorkload, queues []string, supPaused bool, paused map[string]bool) map[string]balancer.QueueWorkload {
	if !supPaused && !slices.ContainsFunc(queues, func(q string) bool { return paused[q] }) {
		return workload
	}
	out := maps.Clone(workload)
	for _, q := range queues {
		if supPaused || paused[q] {
			delete(out, q) // a missing queue is idle
		}
	}
	return out
}
