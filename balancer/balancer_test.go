package balancer_test

import (
	"math"
	"reflect"
	"testing"

	"github.com/fleet-go/fleet/balancer"
	"github.com/fleet-go/fleet/supervisor"
)

// auto returns a valid auto supervisor.
func auto(queues []string, minP, maxP, concurrency int) supervisor.Supervisor {
	return supervisor.Supervisor{
		Name: "test", Queues: queues, Balance: supervisor.BalanceAuto,
		MinProcesses: minP, MaxProcesses: maxP, Concurrency: concurrency,
	}
}

// busy returns a workload of waiting jobs of 1 s each.
func busy(queue string, waiting int) balancer.QueueWorkload {
	return balancer.NewQueueWorkload(queue, waiting, 0, 0, 0)
}

// loads builds a workload map.
func loads(ws ...balancer.QueueWorkload) map[string]balancer.QueueWorkload {
	m := make(map[string]balancer.QueueWorkload, len(ws))
	for _, w := range ws {
		m[w.Queue] = w
	}
	return m
}

func TestQueueWorkload(t *testing.T) {
	tests := []struct {
		name        string
		w           balancer.QueueWorkload
		wantSeconds float64
		wantActive  int
	}{
		{name: "idle", w: balancer.NewQueueWorkload("q", 0, 0, 0, 250), wantSeconds: 0, wantActive: 0},
		{name: "no runtime: 1 s per job", w: balancer.NewQueueWorkload("q", 3, 2, 10, 0), wantSeconds: 5, wantActive: 5},
		{name: "runtime", w: balancer.NewQueueWorkload("q", 10, 10, 0, 250), wantSeconds: 5, wantActive: 20},
		{name: "running only", w: balancer.NewQueueWorkload("q", 0, 4, 0, 2000), wantSeconds: 8, wantActive: 4},
		{name: "negatives are zero", w: balancer.NewQueueWorkload("q", -5, 2, -1, -100), wantSeconds: 2, wantActive: 2},
		{name: "NaN runtime is none", w: balancer.NewQueueWorkload("q", 2, 0, math.NaN(), math.NaN()), wantSeconds: 2, wantActive: 2},
		{name: "literal with negatives", w: balancer.QueueWorkload{Waiting: -3, Running: 1, AvgRuntimeMs: -7}, wantSeconds: 1, wantActive: 1},
		{name: "no overflow", w: balancer.QueueWorkload{Waiting: math.MaxInt, Running: math.MaxInt}, wantSeconds: float64(math.MaxInt), wantActive: math.MaxInt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.w.Seconds(); got != tt.wantSeconds {
				t.Errorf("Seconds = %v, want %v", got, tt.wantSeconds)
			}
			if got := tt.w.Active(); got != tt.wantActive {
				t.Errorf("Active = %v, want %v", got, tt.wantActive)
			}
		})
	}
	w := balancer.NewQueueWorkload("mail", 7, 3, 12.5, 40)
	want := balancer.QueueWorkload{Queue: "mail", Waiting: 7, Running: 3, OldestWaitSecs: 12.5, AvgRuntimeMs: 40}
	if w != want {
		t.Errorf("NewQueueWorkload = %+v, want %+v", w, want)
	}
}

func TestTarget(t *testing.T) {
	ab := []string{"a", "b"}
	abc := []string{"a", "b", "c"}
	tests := []struct {
		name string
		sup  supervisor.Supervisor
		work map[string]balancer.QueueWorkload
		want balancer.Allocation
	}{
		{
			name: "idle: every queue at min",
			sup:  auto(abc, 2, 20, 4),
			want: balancer.Allocation{"a": 2, "b": 2, "c": 2},
		},
		{
			name: "busy queue capped at ceil(active/concurrency)",
			sup:  auto(ab, 1, 10, 4),
			work: loads(busy("b", 10)),
			want: balancer.Allocation{"a": 1, "b": 3},
		},
		{
			name: "running jobs count as active",
			sup:  auto(ab, 1, 10, 2),
			work: loads(balancer.NewQueueWorkload("a", 1, 4, 0, 0)),
			want: balancer.Allocation{"a": 3, "b": 1},
		},
		{
			name: "cap below min: min wins",
			sup:  auto(ab, 3, 10, 10),
			work: loads(busy("a", 5)),
			want: balancer.Allocation{"a": 3, "b": 3},
		},
		{
			name: "large backlog takes all spare",
			sup:  auto(abc, 1, 8, 1),
			work: loads(busy("c", 1_000_000)),
			want: balancer.Allocation{"a": 1, "b": 1, "c": 6},
		},
		{
			name: "proportional to seconds",
			sup:  auto(ab, 1, 10, 1),
			work: loads(busy("a", 300), busy("b", 100)),
			want: balancer.Allocation{"a": 7, "b": 3}, // spare 8: 6 and 2
		},
		{
			name: "runtime weighs in",
			sup:  auto(ab, 1, 10, 1),
			work: loads(
				balancer.NewQueueWorkload("a", 100, 0, 0, 1000), // 100 s
				balancer.NewQueueWorkload("b", 100, 0, 0, 3000), // 300 s
			),
			want: balancer.Allocation{"a": 3, "b": 7},
		},
		{
			name: "caps redistribute to the others",
			sup:  auto(abc, 1, 10, 1),
			work: loads(
				balancer.NewQueueWorkload("a", 2, 0, 0, 1_000_000), // huge weight, cap 2
				balancer.NewQueueWorkload("b", 100, 0, 0, 10),      // small weight, cap 100
			),
			want: balancer.Allocation{"a": 2, "b": 7, "c": 1},
		},
		{
			name: "caps cascade",
			sup:  auto(abc, 1, 12, 1),
			work: loads(
				balancer.NewQueueWorkload("a", 2, 0, 0, 1000),  // 2 s, cap 2
				balancer.NewQueueWorkload("b", 3, 0, 0, 10000), // 30 s, cap 3
				balancer.NewQueueWorkload("c", 500, 0, 0, 1),   // 0.5 s, cap 500
			),
			want: balancer.Allocation{"a": 2, "b": 3, "c": 7},
		},
		{
			name: "all capped: spare left unused",
			sup:  auto(abc, 1, 20, 5),
			work: loads(busy("a", 10), busy("b", 1)),
			want: balancer.Allocation{"a": 2, "b": 1, "c": 1},
		},
		{
			name: "ties go to the first queue",
			sup:  auto(abc, 1, 6, 1),
			work: loads(busy("a", 50), busy("b", 50), busy("c", 50)),
			want: balancer.Allocation{"a": 2, "b": 2, "c": 2},
		},
		{
			name: "ties go to the first queue, odd spare",
			sup:  auto(abc, 1, 4, 1),
			work: loads(busy("c", 50), busy("b", 50), busy("a", 50)),
			want: balancer.Allocation{"a": 2, "b": 1, "c": 1},
		},
		{
			name: "ties follow priority, not names",
			sup:  auto([]string{"c", "b", "a"}, 1, 5, 1),
			work: loads(busy("a", 50), busy("b", 50), busy("c", 50)),
			want: balancer.Allocation{"c": 2, "b": 2, "a": 1},
		},
		{
			name: "largest remainder",
			sup:  auto(abc, 1, 6, 1),
			work: loads(busy("a", 10), busy("b", 60), busy("c", 30)), // 0.3, 1.8, 0.9 of 3
			want: balancer.Allocation{"a": 1, "b": 3, "c": 2},
		},
		{
			name: "workload keys that are not queues are ignored",
			sup:  auto(ab, 1, 4, 1),
			work: loads(busy("other", 1000)),
			want: balancer.Allocation{"a": 1, "b": 1},
		},
		{
			name: "simple: 5 over 2",
			sup:  supervisor.Supervisor{Queues: ab, Balance: supervisor.BalanceSimple, MaxProcesses: 5, Concurrency: 1},
			want: balancer.Allocation{"a": 3, "b": 2},
		},
		{
			name: "simple: 8 over 3, workload ignored",
			sup:  supervisor.Supervisor{Queues: abc, Balance: supervisor.BalanceSimple, MaxProcesses: 8, Concurrency: 1},
			work: loads(busy("c", 1000)),
			want: balancer.Allocation{"a": 3, "b": 3, "c": 2},
		},
		{
			name: "off: one group of max",
			sup:  supervisor.Supervisor{Queues: []string{"exports", "default"}, Balance: supervisor.BalanceOff, MaxProcesses: 6, Concurrency: 1},
			work: loads(busy("exports", 1000)),
			want: balancer.Allocation{"exports,default": 6},
		},
		{
			name: "hand-made supervisor: unknown balance is auto, min 0 is 1",
			sup:  supervisor.Supervisor{Queues: ab, MaxProcesses: 1},
			want: balancer.Allocation{"a": 1, "b": 1},
		},
		{
			name: "hand-made supervisor: simple with too few processes keeps every queue",
			sup:  supervisor.Supervisor{Queues: abc, Balance: supervisor.BalanceSimple, MaxProcesses: 2},
			want: balancer.Allocation{"a": 1, "b": 1, "c": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := balancer.Target(tt.sup, tt.work)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Target = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNextAllocation(t *testing.T) {
	ab := []string{"a", "b"}
	abc := []string{"a", "b", "c"}
	tests := []struct {
		name    string
		sup     supervisor.Supervisor
		current balancer.Allocation
		work    map[string]balancer.QueueWorkload
		shift   int
		want    balancer.Allocation
	}{
		{
			name: "start idle: every queue at min",
			sup:  auto(abc, 1, 10, 4),
			want: balancer.Allocation{"a": 1, "b": 1, "c": 1},
		},
		{
			name:  "start idle with min 2: raised at once whatever shift",
			sup:   auto(abc, 2, 10, 4),
			shift: 1,
			want:  balancer.Allocation{"a": 2, "b": 2, "c": 2},
		},
		{
			name:  "start busy: min plus shift, never max",
			sup:   auto(ab, 1, 10, 1),
			work:  loads(busy("a", 1000), busy("b", 1000)),
			shift: 1,
			want:  balancer.Allocation{"a": 2, "b": 2},
		},
		{
			name:    "queue at 0 is raised to min",
			sup:     auto(ab, 1, 4, 1),
			current: balancer.Allocation{"a": 3, "b": 0},
			work:    loads(busy("a", 1000)),
			want:    balancer.Allocation{"a": 3, "b": 1},
		},
		{
			name:    "backlog grows by shift",
			sup:     auto(ab, 1, 10, 4),
			current: balancer.Allocation{"a": 1, "b": 2},
			work:    loads(busy("b", 1000)),
			shift:   3,
			want:    balancer.Allocation{"a": 1, "b": 5},
		},
		{
			name:    "growth stops at the cap",
			sup:     auto(ab, 1, 10, 4),
			current: balancer.Allocation{"a": 1, "b": 2},
			work:    loads(busy("b", 10)), // cap 3
			shift:   3,
			want:    balancer.Allocation{"a": 1, "b": 3},
		},
		{
			name:    "idle shrinks by shift towards min",
			sup:     auto(ab, 1, 10, 4),
			current: balancer.Allocation{"a": 6, "b": 3},
			shift:   2,
			want:    balancer.Allocation{"a": 4, "b": 1},
		},
		{
			name:    "decreases first, then increases in priority order up to max",
			sup:     auto(abc, 1, 6, 1),
			current: balancer.Allocation{"a": 1, "b": 1, "c": 4},
			work:    loads(busy("a", 100), busy("b", 100)), // target 3, 2, 1
			shift:   2,
			want:    balancer.Allocation{"a": 3, "b": 1, "c": 2},
		},
		{
			name:    "priority order, not key order",
			sup:     auto([]string{"c", "b", "a"}, 1, 6, 1),
			current: balancer.Allocation{"c": 1, "b": 1, "a": 4},
			work:    loads(busy("c", 100), busy("b", 100)), // target c 3, b 2, a 1
			shift:   2,
			want:    balancer.Allocation{"c": 3, "b": 1, "a": 2},
		},
		{
			name:    "current over max is cut from the last queues",
			sup:     auto(abc, 1, 4, 1),
			current: balancer.Allocation{"a": 10, "b": 10, "c": 10},
			work:    loads(busy("a", 1000)),
			shift:   1,
			want:    balancer.Allocation{"a": 2, "b": 1, "c": 1},
		},
		{
			name:    "raising a missing queue to min makes room",
			sup:     auto(abc, 1, 4, 1),
			current: balancer.Allocation{"a": 4},
			work:    loads(busy("a", 1000)),
			shift:   1,
			want:    balancer.Allocation{"a": 2, "b": 1, "c": 1},
		},
		{
			name:    "stale keys ignored, shift below 1 is 1",
			sup:     auto(ab, 1, 10, 1),
			current: balancer.Allocation{"a": 1, "b": 1, "gone": 5, "a,b": 3},
			work:    loads(busy("a", 100)),
			shift:   -4,
			want:    balancer.Allocation{"a": 2, "b": 1},
		},
		{
			name:    "simple: jump to the split",
			sup:     supervisor.Supervisor{Queues: ab, Balance: supervisor.BalanceSimple, MaxProcesses: 5, Concurrency: 1},
			current: balancer.Allocation{"a": 0, "b": 5},
			shift:   1,
			want:    balancer.Allocation{"a": 3, "b": 2},
		},
		{
			name:    "off: jump to max",
			sup:     supervisor.Supervisor{Queues: []string{"exports", "default"}, Balance: supervisor.BalanceOff, MaxProcesses: 7, Concurrency: 1},
			current: balancer.Allocation{"exports,default": 1, "exports": 3},
			shift:   1,
			want:    balancer.Allocation{"exports,default": 7},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := balancer.NextAllocation(tt.sup, tt.current, tt.work, tt.shift, -1)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("NextAllocation = %v, want %v", got, tt.want)
			}
		})
	}
}

// A backlog on one queue grows it by shift per step until its cap, then it
// stays.
func TestBacklogGrowsByShift(t *testing.T) {
	tests := []struct {
		name    string
		waiting int
		shift   int
		want    []int // the busy queue's count after each step
	}{
		{name: "shift 1, cap 5", waiting: 20, shift: 1, want: []int{2, 3, 4, 5, 5, 5}},
		{name: "shift 2, cap 5", waiting: 20, shift: 2, want: []int{3, 5, 5, 5}},
		{name: "shift 3, bound by max", waiting: 1000, shift: 3, want: []int{4, 7, 8, 8, 8}},
		{name: "cap 1 is min", waiting: 4, shift: 2, want: []int{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sup := auto([]string{"default", "mail"}, 1, 9, 4)
			work := loads(busy("mail", tt.waiting))
			var cur balancer.Allocation
			for step, want := range tt.want {
				cur = balancer.NextAllocation(sup, cur, work, tt.shift, -1)
				if cur["mail"] != want || cur["default"] != 1 {
					t.Fatalf("step %d: %v, want mail %d, default 1", step+1, cur, want)
				}
			}
		})
	}
}

// The scenario of a mail burst on a two-queue supervisor.
func TestScenarioMailBurst(t *testing.T) {
	sup := auto([]string{"default", "mail"}, 1, 4, 4)
	const shift = 1
	work := loads(busy("mail", 3000))

	cur := balancer.NextAllocation(sup, nil, work, shift, -1)
	if !(cur["mail"] > cur["default"]) || cur["default"] != 1 {
		t.Fatalf("after 1 step: %v, want mail > default and default 1", cur)
	}
	for range 10 {
		cur = balancer.NextAllocation(sup, cur, work, shift, -1)
		if cur["default"] != 1 || cur.Total() > 4 {
			t.Fatalf("while busy: %v", cur)
		}
	}
	if want := (balancer.Allocation{"default": 1, "mail": 3}); !reflect.DeepEqual(cur, want) {
		t.Fatalf("busy: %v, want %v", cur, want)
	}

	// Drained: back to 1/1, one process per step, then still.
	for _, want := range []int{2, 1} {
		cur = balancer.NextAllocation(sup, cur, nil, shift, -1)
		if cur["mail"] != want || cur["default"] != 1 {
			t.Fatalf("draining: %v, want mail %d", cur, want)
		}
	}
	for step := range 100 {
		cur = balancer.NextAllocation(sup, cur, loads(busy("default", 0), busy("mail", 0)), shift, -1)
		if want := (balancer.Allocation{"default": 1, "mail": 1}); !reflect.DeepEqual(cur, want) {
			t.Fatalf("idle step %d: %v, want %v", step, cur, want)
		}
	}
}

func TestAllocationTotal(t *testing.T) {
	if got := (balancer.Allocation{"a": 2, "b": 3}).Total(); got != 5 {
		t.Errorf("Total = %d, want 5", got)
	}
	if got := balancer.Allocation(nil).Total(); got != 0 {
		t.Errorf("Total of nil = %d, want 0", got)
	}
}

func TestNextAllocationCeiling(t *testing.T) {
	sup := supervisor.Supervisor{Name: "s", Queues: []string{"a", "b"}, Balance: supervisor.BalanceAuto,
		MinProcesses: 1, MaxProcesses: 8, Concurrency: 1}
	work := loads(busy("a", 100), busy("b", 100))
	cur := balancer.Allocation{"a": 4, "b": 4}
	// A ceiling below the current total cuts at once, last queue first,
	// below min_processes if need be.
	if got := balancer.NextAllocation(sup, cur, work, 1, 3); !reflect.DeepEqual(got, balancer.Allocation{"a": 3, "b": 0}) {
		t.Errorf("ceiling 3 = %v, want a:3 b:0", got)
	}
	if got := balancer.NextAllocation(sup, cur, work, 1, 0); got.Total() != 0 {
		t.Errorf("ceiling 0 = %v, want nothing", got)
	}
	// A ceiling above what the step gives changes nothing.
	if got, want := balancer.NextAllocation(sup, cur, work, 1, 100), balancer.NextAllocation(sup, cur, work, 1, -1); !reflect.DeepEqual(got, want) {
		t.Errorf("ceiling 100 = %v, want %v", got, want)
	}
	off := sup
	off.Balance = supervisor.BalanceOff
	if got := balancer.NextAllocation(off, nil, work, 1, 5); got.Total() != 5 {
		t.Errorf("balance off, ceiling 5 = %v, want 5 processes", got)
	}
}
