// Package balancer decides how many worker processes each process group of a
// supervisor runs.
//
// NextAllocation is the only place an allocation is decided. Given a
// supervisor, the processes it runs now and the workload of its queues, it
// returns the allocation of the next step, moving towards Target:
//
//   - balance "off": one group of exactly max_processes, at once;
//   - balance "simple": max_processes split evenly over the queues, the
//     remainder to the first queues, at once;
//   - balance "auto": every queue keeps min_processes at all times, and the
//     spare processes go to the queues in proportion to their workload, each
//     queue moving at most balance_max_shift processes per step.
//
// The package is pure: no I/O, no clock, no randomness and no dependence on
// map iteration order, so the same inputs always give the same allocation.
package balancer

import (
	"cmp"
	"math"
	"slices"

	"github.com/fleet-go/fleet/supervisor"
)

// QueueWorkload is what the balancer knows about one queue.
type QueueWorkload struct {
	// Queue is the queue's name.
	Queue string
	// Waiting is the number of jobs ready and waiting.
	Waiting int
	// Running is the number of jobs reserved by workers now.
	Running int
	// OldestWaitSecs is how long the oldest waiting job has waited.
	OldestWaitSecs float64
	// AvgRuntimeMs is the average runtime over the last 5 minutes; 0 means
	// no job ran.
	AvgRuntimeMs float64
}

// maxRuntimeMs bounds AvgRuntimeMs (about 31 years) so that workload
// seconds stay finite.
const maxRuntimeMs = 1e12

// NewQueueWorkload returns the workload of queue. Negative counts and
// durations, and NaN durations, are taken as 0.
func NewQueueWorkload(queue string, waiting, running int, oldestWaitSecs, avgRuntimeMs float64) QueueWorkload {
	return QueueWorkload{
		Queue:          queue,
		Waiting:        max(waiting, 0),
		Running:        max(running, 0),
		OldestWaitSecs: nonNegative(oldestWaitSecs),
		AvgRuntimeMs:   nonNegative(avgRuntimeMs),
	}
}

// Active is the number of jobs waiting or running (negative counts are
// taken as 0).
func (w QueueWorkload) Active() int {
	a, b := max(w.Waiting, 0), max(w.Running, 0)
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// Seconds is the workload of the queue in seconds: (waiting + running) ×
// average runtime, counting 1 s per job when AvgRuntimeMs is 0 (or not a
// positive number).
func (w QueueWorkload) Seconds() float64 {
	perJob := 1.0
	if ms := nonNegative(w.AvgRuntimeMs); ms > 0 {
		perJob = min(ms, maxRuntimeMs) / 1000
	}
	return float64(w.Active()) * perJob
}

// nonNegative returns x, or 0 when x is negative or NaN.
func nonNegative(x float64) float64 {
	if !(x > 0) {
		return 0
	}
	return x
}

// Allocation maps a group key (see supervisor.Supervisor.Groups) to a
// process count.
type Allocation map[string]int

// Total is the sum of the allocation's process counts.
func (a Allocation) Total() int {
	t := 0
	for _, n := range a {
		t += n
	}
	return t
}

// NextAllocation is the only place allocation is decided: it returns the
// number of processes each of sup's groups runs after this step. The result
// has exactly one entry per group and its total never exceeds
// max_processes.
//
// current holds the processes that are running and not stopping (stopping
// processes are never capacity); keys that are not groups of sup are
// ignored and a missing group counts as 0. workload is keyed by queue; a
// missing queue is idle. shift is fleet.balance_max_shift; values below 1
// mean 1.
//
// Balance "off" and "simple" jump to Target. Balance "auto" moves each
// queue from its current count towards its Target:
//
//   - a queue below min_processes (missing from current at start, say)
//     counts as being at min_processes: it is raised to it at once,
//     whatever shift, and then moves like the others;
//   - each queue moves by at most shift towards its target;
//   - decreases are applied before increases, and increases are granted in
//     priority order until the total reaches max_processes.
//
// Only when current itself holds more than max_processes (max_processes
// lowered, or queues raised to min_processes) do queues shrink by more than
// shift: a queue counts as at most max_processes, and the excess is taken,
// down to their targets, from the last queues first.
//
// With constant inputs, repeated steps reach Target and stay there.
//
// ceiling, when not negative, caps the total: the master's share of a
// fleet-wide budget (fleet_max_processes). It is applied last and wins over
// everything else, min_processes included: an allocation above it is cut at
// once, from the last queues first, so a master whose share drops shrinks
// without waiting for shift.
//
// sup is expected to come from supervisor.Resolve. Otherwise a Balance other
// than "simple" or "off" is taken as "auto", concurrency and min_processes
// below 1 as 1, and a max_processes too small for the balance's rule is
// raised to the least that obeys it, so that no queue is left without
// processes.
func NextAllocation(sup supervisor.Supervisor, current Allocation, workload map[string]QueueWorkload, shift, ceiling int) Allocation {
	alloc := nextAllocation(sup, current, workload, shift)
	if ceiling < 0 {
		return alloc
	}
	groups := sanitize(sup).Groups()
	over := alloc.Total() - ceiling
	for i := len(groups) - 1; i >= 0 && over > 0; i-- {
		cut := min(alloc[groups[i].Key], over)
		alloc[groups[i].Key] -= cut
		over -= cut
	}
	return alloc
}

func nextAllocation(sup supervisor.Supervisor, current Allocation, workload map[string]QueueWorkload, shift int) Allocation {
	sup = sanitize(sup)
	target := Target(sup, workload)
	if sup.Balance == supervisor.BalanceOff || sup.Balance == supervisor.BalanceSimple {
		return target
	}
	shift = max(shift, 1)

	queues := sup.Queues
	next := make([]int, len(queues))
	total := 0
	// Raise to min (no queue counts above max_processes either), then apply
	// the decreases.
	for i, q := range queues {
		cur := min(max(current[q], sup.MinProcesses), sup.MaxProcesses)
		if t := target[q]; cur > t {
			cur = max(t, cur-shift)
		}
		next[i] = cur
		total = satAdd(total, cur)
	}
	// Take any excess over max_processes from the last queues first.
	for i := len(queues) - 1; i >= 0 && total > sup.MaxProcesses; i-- {
		cut := min(next[i]-target[queues[i]], total-sup.MaxProcesses)
		if cut > 0 {
			next[i] -= cut
			total -= cut
		}
	}
	// Grant the increases in priority order.
	for i, q := range queues {
		if t := target[q]; next[i] < t {
			inc := min(t-next[i], shift, sup.MaxProcesses-total)
			if inc > 0 {
				next[i] += inc
				total += inc
			}
		}
	}

	alloc := make(Allocation, len(queues))
	for i, q := range queues {
		alloc[q] = next[i]
	}
	return alloc
}

// Target is the allocation NextAllocation moves towards; it has exactly one
// entry per group of sup.
//
//   - "off": the one group gets max_processes.
//   - "simple": max_processes split evenly over the queues; the remainder
//     goes one each to the first queues.
//   - "auto": every queue gets min_processes. The spare processes,
//     max_processes − min_processes × queues, go to the queues in
//     proportion to QueueWorkload.Seconds, where a queue never gets more
//     than max(min_processes, ⌈(waiting + running) / concurrency⌉) and what
//     a capped queue cannot take goes to the others (water-filling).
//     Fractions are rounded by largest remainder, ties going to the first
//     queue. Spare processes no queue can use are not allocated, so an idle
//     supervisor runs min_processes per queue.
//
// sup is sanitized as described at NextAllocation.
func Target(sup supervisor.Supervisor, workload map[string]QueueWorkload) Allocation {
	sup = sanitize(sup)
	alloc := make(Allocation, len(sup.Queues))
	switch sup.Balance {
	case supervisor.BalanceOff:
		for _, g := range sup.Groups() {
			alloc[g.Key] = sup.MaxProcesses
		}
	case supervisor.BalanceSimple:
		n := len(sup.Queues)
		for i, q := range sup.Queues {
			alloc[q] = sup.MaxProcesses / n
			if i < sup.MaxProcesses%n {
				alloc[q]++
			}
		}
	default:
		extra := spread(sup, workload)
		for i, q := range sup.Queues {
			alloc[q] = sup.MinProcesses + extra[i]
		}
	}
	return alloc
}

// spread returns the processes each queue of an auto supervisor gets above
// min_processes, in queue order.
func spread(sup supervisor.Supervisor, workload map[string]QueueWorkload) []int {
	n := len(sup.Queues)
	spare := sup.MaxProcesses - sup.MinProcesses*n // sanitize keeps this ≥ 0
	room := make([]int, n)                         // most a queue may get above min
	weight := make([]float64, n)
	roomTotal := 0
	for i, q := range sup.Queues {
		w := workload[q]
		if s := w.Seconds(); s > 0 {
			active := w.Active()
			need := active / sup.Concurrency
			if active%sup.Concurrency != 0 {
				need++
			}
			room[i] = min(max(need-sup.MinProcesses, 0), spare)
			if room[i] > 0 {
				weight[i] = s
			}
		}
		roomTotal = satAdd(roomTotal, room[i])
	}
	give := min(spare, roomTotal)
	extra := make([]int, n)
	if give == 0 {
		return extra
	}

	// Water-filling: share what is left in proportion to weight among the
	// queues not yet capped; cap every queue whose share reaches its room,
	// and share again.
	share := make([]float64, n)
	open := make([]bool, n)
	for i := range n {
		open[i] = room[i] > 0
	}
	left := float64(give)
	for {
		sum := 0.0
		for i := range n {
			if open[i] {
				sum += weight[i]
			}
		}
		if sum == 0 {
			break
		}
		capped := false
		for i := range n {
			if open[i] && left*weight[i]/sum >= float64(room[i]) {
				share[i], open[i], capped = float64(room[i]), false, true
				left -= float64(room[i])
			}
		}
		if !capped {
			for i := range n {
				if open[i] {
					share[i] = left * weight[i] / sum
				}
			}
			break
		}
	}

	// Largest remainder: floor every share, then hand out what is left one
	// by one by descending fraction, ties to the first queue.
	given := 0
	for i := range n {
		extra[i] = min(max(int(math.Floor(share[i])), 0), room[i])
		given += extra[i]
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(share[b]-math.Floor(share[b]), share[a]-math.Floor(share[a]))
	})
	for given < give {
		progress := false
		for _, i := range order {
			if given == give {
				break
			}
			if extra[i] < room[i] {
				extra[i]++
				given++
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	return extra
}

// sanitize makes sup obey the rules the balancer relies on; a supervisor
// from supervisor.Resolve is returned unchanged.
func sanitize(sup supervisor.Supervisor) supervisor.Supervisor {
	if sup.Balance != supervisor.BalanceOff && sup.Balance != supervisor.BalanceSimple {
		sup.Balance = supervisor.BalanceAuto
	}
	sup.Concurrency = max(sup.Concurrency, 1)
	n := max(len(sup.Queues), 1)
	switch sup.Balance {
	case supervisor.BalanceOff:
		sup.MaxProcesses = max(sup.MaxProcesses, 1)
	case supervisor.BalanceSimple:
		sup.MaxProcesses = max(sup.MaxProcesses, n)
	default:
		sup.MinProcesses = max(sup.MinProcesses, 1)
		if sup.MinProcesses > math.MaxInt/n {
			sup.MinProcesses = math.MaxInt / n
		}
		sup.MaxProcesses = max(sup.MaxProcesses, sup.MinProcesses*n)
	}
	return sup
}

// satAdd returns a + b for non-negative a and b, saturating at math.MaxInt.
func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}
