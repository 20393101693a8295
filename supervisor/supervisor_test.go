package supervisor_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/supervisor"
)

func intPtr(n int) *int { return &n }

// opts returns Options with the configuration's defaults and the given
// supervisors.
func opts(sups map[string]supervisor.SupervisorOptions) supervisor.Options {
	return supervisor.Options{
		Supervisors:        sups,
		DefaultQueues:      []string{"default"},
		DefaultQueue:       "default",
		DefaultConcurrency: 4,
		Driver:             "database",
	}
}

func TestResolveDefaults(t *testing.T) {
	tests := []struct {
		name string
		o    supervisor.Options
		want []supervisor.Supervisor
	}{
		{
			name: "no supervisor: default works queue.queues",
			o: supervisor.Options{
				DefaultQueues:      []string{"default", "mail"},
				DefaultQueue:       "default",
				DefaultConcurrency: 8,
				Driver:             "database",
			},
			want: []supervisor.Supervisor{{
				Name: "default", Queues: []string{"default", "mail"}, Balance: supervisor.BalanceAuto,
				MinProcesses: 1, MaxProcesses: 4, Concurrency: 8,
			}},
		},
		{
			name: "no supervisor and no queue.queues: default works queue.default_queue",
			o:    supervisor.Options{DefaultQueue: "jobs", DefaultConcurrency: 2, Driver: "database"},
			want: []supervisor.Supervisor{{
				Name: "default", Queues: []string{"jobs"}, Balance: supervisor.BalanceAuto,
				MinProcesses: 1, MaxProcesses: 4, Concurrency: 2,
			}},
		},
		{
			name: "empty supervisors map is no supervisor",
			o: supervisor.Options{
				Supervisors: map[string]supervisor.SupervisorOptions{}, DefaultQueues: []string{"a"},
				DefaultConcurrency: 1, Driver: "database",
			},
			want: []supervisor.Supervisor{{
				Name: "default", Queues: []string{"a"}, Balance: supervisor.BalanceAuto,
				MinProcesses: 1, MaxProcesses: 4, Concurrency: 1,
			}},
		},
		{
			name: "empty driver is taken as unset",
			o:    supervisor.Options{DefaultQueues: []string{"a"}, DefaultConcurrency: 1},
			want: []supervisor.Supervisor{{
				Name: "default", Queues: []string{"a"}, Balance: supervisor.BalanceAuto,
				MinProcesses: 1, MaxProcesses: 4, Concurrency: 1,
			}},
		},
		{
			name: "configured supervisor with only queues takes the defaults",
			o: opts(map[string]supervisor.SupervisorOptions{
				"mail": {Queues: []string{"mail"}},
			}),
			want: []supervisor.Supervisor{{
				Name: "mail", Queues: []string{"mail"}, Balance: supervisor.BalanceAuto,
				MinProcesses: 1, MaxProcesses: 4, Concurrency: 4,
			}},
		},
		{
			name: "every option set",
			o: opts(map[string]supervisor.SupervisorOptions{
				"web-1_eu": {
					Queues: []string{"exports", "default"}, Balance: "off",
					MinProcesses: intPtr(0), MaxProcesses: intPtr(10), Concurrency: intPtr(2),
					MaxJobs: 1000, MaxMemoryMB: 512, MaxTimeSecs: 3600,
					Tries: intPtr(2), Backoff: []int{0, 5}, TimeoutSecs: intPtr(30), PayloadBudgetBytes: intPtr(8 << 20),
				},
			}),
			want: []supervisor.Supervisor{{
				Name: "web-1_eu", Queues: []string{"exports", "default"}, Balance: supervisor.BalanceOff,
				MinProcesses: 0, MaxProcesses: 10, Concurrency: 2,
				MaxJobs: 1000, MaxMemoryMB: 512, MaxTime: time.Hour,
				Tries: 2, Backoff: []int{0, 5}, Timeout: 30 * time.Second, PayloadBudget: 8 << 20,
			}},
		},
		{
			name: "a byte budget of 0 is no bound",
			o:    opts(map[string]supervisor.SupervisorOptions{"big": {Queues: []string{"big"}, PayloadBudgetBytes: intPtr(0)}}),
			want: []supervisor.Supervisor{{
				Name: "big", Queues: []string{"big"}, Balance: supervisor.BalanceAuto,
				MinProcesses: 1, MaxProcesses: 4, Concurrency: 4, PayloadBudget: -1,
			}},
		},
		{
			name: "sorted by name",
			o: opts(map[string]supervisor.SupervisorOptions{
				"zeta":  {Queues: []string{"z"}, Balance: "simple"},
				"alpha": {Queues: []string{"a"}},
				"Mid":   {Queues: []string{"m"}, Balance: "auto"},
			}),
			want: []supervisor.Supervisor{
				{Name: "Mid", Queues: []string{"m"}, Balance: supervisor.BalanceAuto, MinProcesses: 1, MaxProcesses: 4, Concurrency: 4},
				{Name: "alpha", Queues: []string{"a"}, Balance: supervisor.BalanceAuto, MinProcesses: 1, MaxProcesses: 4, Concurrency: 4},
				{Name: "zeta", Queues: []string{"z"}, Balance: supervisor.BalanceSimple, MinProcesses: 1, MaxProcesses: 4, Concurrency: 4},
			},
		},
		{
			name: "auto exactly at its bound",
			o: opts(map[string]supervisor.SupervisorOptions{
				"s": {Queues: []string{"a", "b", "c"}, MinProcesses: intPtr(2), MaxProcesses: intPtr(6)},
			}),
			want: []supervisor.Supervisor{{
				Name: "s", Queues: []string{"a", "b", "c"}, Balance: supervisor.BalanceAuto,
				MinProcesses: 2, MaxProcesses: 6, Concurrency: 4,
			}},
		},
		{
			name: "simple exactly at its bound, min_processes 0 allowed",
			o: opts(map[string]supervisor.SupervisorOptions{
				"s": {Queues: []string{"a", "b", "c"}, Balance: "simple", MinProcesses: intPtr(0), MaxProcesses: intPtr(3)},
			}),
			want: []supervisor.Supervisor{{
				Name: "s", Queues: []string{"a", "b", "c"}, Balance: supervisor.BalanceSimple,
				MinProcesses: 0, MaxProcesses: 3, Concurrency: 4,
			}},
		},
		{
			name: "off ignores the per-queue rules",
			o: opts(map[string]supervisor.SupervisorOptions{
				"s": {Queues: []string{"a", "b", "c", "d", "e"}, Balance: "off", MaxProcesses: intPtr(1)},
			}),
			want: []supervisor.Supervisor{{
				Name: "s", Queues: []string{"a", "b", "c", "d", "e"}, Balance: supervisor.BalanceOff,
				MinProcesses: 1, MaxProcesses: 1, Concurrency: 4,
			}},
		},
		{
			name: "zero limits and unset job overrides",
			o: opts(map[string]supervisor.SupervisorOptions{
				"s": {Queues: []string{"a"}, Backoff: []int{}},
			}),
			want: []supervisor.Supervisor{{
				Name: "s", Queues: []string{"a"}, Balance: supervisor.BalanceAuto,
				MinProcesses: 1, MaxProcesses: 4, Concurrency: 4, Backoff: []int{},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := supervisor.Resolve(tt.o)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Resolve =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// Resolve copies the slices it is given.
func TestResolveCopies(t *testing.T) {
	queues, backoff := []string{"a", "b"}, []int{1, 2}
	got, err := supervisor.Resolve(opts(map[string]supervisor.SupervisorOptions{
		"s": {Queues: queues, Backoff: backoff},
	}))
	if err != nil {
		t.Fatal(err)
	}
	queues[0], backoff[0] = "x", 99
	if got[0].Queues[0] != "a" || got[0].Backoff[0] != 1 {
		t.Errorf("Resolve shares its input: %+v", got[0])
	}
}

func TestResolveOnly(t *testing.T) {
	three := map[string]supervisor.SupervisorOptions{
		"a": {Queues: []string{"qa"}},
		"b": {Queues: []string{"qb"}},
		"c": {Queues: []string{"qc"}},
	}
	tests := []struct {
		name    string
		only    []string
		sups    map[string]supervisor.SupervisorOptions
		want    []string // names
		wantErr string
	}{
		{name: "empty only keeps all", sups: three, want: []string{"a", "b", "c"}},
		{name: "one", only: []string{"b"}, sups: three, want: []string{"b"}},
		{name: "several, still sorted by name", only: []string{"c", "a"}, sups: three, want: []string{"a", "c"}},
		{name: "duplicates", only: []string{"a", "a"}, sups: three, want: []string{"a"}},
		{name: "implicit default", only: []string{"default"}, want: []string{"default"}},
		{
			name: "unknown", only: []string{"a", "x"}, sups: three,
			wantErr: `fleet.only: no supervisor named "x" (have: a, b, c)`,
		},
		{
			name: "unknown, each once, in order", only: []string{"y", "x", "y"}, sups: three,
			wantErr: `fleet.only: no supervisor named "y" (have: a, b, c)` + "\n" +
				`fleet.only: no supervisor named "x" (have: a, b, c)`,
		},
		{
			name: "unknown with the implicit default", only: []string{"web"},
			wantErr: `fleet.only: no supervisor named "web" (have: default)`,
		},
		{
			name: "a supervisor left out by only is still checked", only: []string{"a"},
			sups: map[string]supervisor.SupervisorOptions{
				"a": {Queues: []string{"qa"}},
				"b": {Queues: []string{"qb"}, MaxProcesses: intPtr(0)},
			},
			wantErr: "fleet.supervisors.b.max_processes: must be at least 1, got 0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts(tt.sups)
			o.Only = tt.only
			got, err := supervisor.Resolve(o)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Resolve error = %v, want %q", err, tt.wantErr)
				}
				if got != nil {
					t.Errorf("Resolve returned %v with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			var names []string
			for _, s := range got {
				names = append(names, s.Name)
			}
			if !reflect.DeepEqual(names, tt.want) {
				t.Errorf("names = %q, want %q", names, tt.want)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	one := func(s supervisor.SupervisorOptions) map[string]supervisor.SupervisorOptions {
		return map[string]supervisor.SupervisorOptions{"web": s}
	}
	q := []string{"default"}
	tests := []struct {
		name string
		o    supervisor.Options
		want []string // the lines of the error, in order
	}{
		{
			name: "memory driver",
			o:    func() supervisor.Options { o := opts(nil); o.Driver = "memory"; return o }(),
			want: []string{`queue.driver: the fleet master needs the "database" driver, got "memory"`},
		},
		{
			name: "unknown driver",
			o:    func() supervisor.Options { o := opts(nil); o.Driver = "redis"; return o }(),
			want: []string{`queue.driver: the fleet master needs the "database" driver, got "redis"`},
		},
		{
			name: "queues unset",
			o:    opts(one(supervisor.SupervisorOptions{})),
			want: []string{"fleet.supervisors.web.queues: must list at least one queue"},
		},
		{
			name: "queues empty",
			o:    opts(one(supervisor.SupervisorOptions{Queues: []string{}})),
			want: []string{"fleet.supervisors.web.queues: must list at least one queue"},
		},
		{
			name: "empty and blank queue names",
			o:    opts(one(supervisor.SupervisorOptions{Queues: []string{"a", "", " "}, MaxProcesses: intPtr(8)})),
			want: []string{
				"fleet.supervisors.web.queues[1]: must not be empty",
				"fleet.supervisors.web.queues[2]: must not be empty",
			},
		},
		{
			name: "duplicate queue",
			o:    opts(one(supervisor.SupervisorOptions{Queues: []string{"a", "b", "a"}})),
			want: []string{`fleet.supervisors.web.queues[2]: duplicate queue "a" (also queues[0])`},
		},
		{
			name: "implicit default: bad queue.queues",
			o: supervisor.Options{
				DefaultQueues: []string{"a", "a"}, DefaultConcurrency: 1, Driver: "database",
			},
			want: []string{`fleet.supervisors.default.queues[1]: duplicate queue "a" (also queues[0]) (from queue.queues)`},
		},
		{
			name: "implicit default: empty queue.default_queue",
			o:    supervisor.Options{DefaultConcurrency: 1, Driver: "database"},
			want: []string{"fleet.supervisors.default.queues[0]: must not be empty (from queue.queues)"},
		},
		{
			name: "implicit default: auto needs min × queues ≤ max",
			o: supervisor.Options{
				DefaultQueues: []string{"a", "b", "c", "d", "e"}, DefaultConcurrency: 4, Driver: "database",
			},
			want: []string{`fleet.supervisors.default: balance "auto" needs min_processes × queues ≤ max_processes (1 × 5 > 4)`},
		},
		{
			name: "auto needs min × queues ≤ max",
			o: opts(one(supervisor.SupervisorOptions{
				Queues: []string{"a", "b", "c"}, MinProcesses: intPtr(2), MaxProcesses: intPtr(5),
			})),
			want: []string{`fleet.supervisors.web: balance "auto" needs min_processes × queues ≤ max_processes (2 × 3 > 5)`},
		},
		{
			name: "auto rule does not overflow",
			o: opts(one(supervisor.SupervisorOptions{
				Queues: []string{"a", "b"}, MinProcesses: intPtr(1 << 62), MaxProcesses: intPtr(1 << 62),
			})),
			want: []string{`fleet.supervisors.web: balance "auto" needs min_processes × queues ≤ max_processes (4611686018427387904 × 2 > 4611686018427387904)`},
		},
		{
			name: "simple needs max ≥ queues",
			o: opts(one(supervisor.SupervisorOptions{
				Queues: []string{"a", "b", "c"}, Balance: "simple", MaxProcesses: intPtr(2),
			})),
			want: []string{`fleet.supervisors.web: balance "simple" needs max_processes ≥ queues (2 < 3)`},
		},
		{
			name: "unknown balance",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, Balance: "fair"})),
			want: []string{`fleet.supervisors.web.balance: must be auto, simple or off, got "fair"`},
		},
		{
			name: "balance is case-sensitive",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, Balance: "Auto"})),
			want: []string{`fleet.supervisors.web.balance: must be auto, simple or off, got "Auto"`},
		},
		{
			name: "min_processes 0 under auto (explicit)",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, Balance: "auto", MinProcesses: intPtr(0)})),
			want: []string{`fleet.supervisors.web.min_processes: must be at least 1 under balance "auto", got 0`},
		},
		{
			name: "min_processes 0 under auto (default balance)",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, MinProcesses: intPtr(0)})),
			want: []string{`fleet.supervisors.web.min_processes: must be at least 1 under balance "auto", got 0`},
		},
		{
			name: "negative min_processes under simple",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, Balance: "simple", MinProcesses: intPtr(-1)})),
			want: []string{"fleet.supervisors.web.min_processes: must be at least 0, got -1"},
		},
		{
			name: "max_processes 0",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, MaxProcesses: intPtr(0)})),
			want: []string{"fleet.supervisors.web.max_processes: must be at least 1, got 0"},
		},
		{
			name: "negative max_processes under off",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, Balance: "off", MaxProcesses: intPtr(-3)})),
			want: []string{"fleet.supervisors.web.max_processes: must be at least 1, got -3"},
		},
		{
			name: "concurrency 0",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, Concurrency: intPtr(0)})),
			want: []string{"fleet.supervisors.web.concurrency: must be at least 1, got 0"},
		},
		{
			name: "concurrency from queue.workers",
			o: func() supervisor.Options {
				o := opts(one(supervisor.SupervisorOptions{Queues: q}))
				o.DefaultConcurrency = 0
				return o
			}(),
			want: []string{"fleet.supervisors.web.concurrency: must be at least 1, got 0 (from queue.workers)"},
		},
		{
			name: "negative limits",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, MaxJobs: -1, MaxMemoryMB: -2, MaxTimeSecs: -3})),
			want: []string{
				"fleet.supervisors.web.max_jobs: must be at least 0, got -1",
				"fleet.supervisors.web.max_memory_mb: must be at least 0, got -2",
				"fleet.supervisors.web.max_time_secs: must be at least 0, got -3",
			},
		},
		{
			name: "negative byte budget",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, PayloadBudgetBytes: intPtr(-1)})),
			want: []string{"fleet.supervisors.web.payload_budget_bytes: must be at least 0 (0: no bound), got -1"},
		},
		{
			name: "negative backoff",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, Backoff: []int{1, -5, 0, -1}})),
			want: []string{
				"fleet.supervisors.web.backoff[1]: must be at least 0, got -5",
				"fleet.supervisors.web.backoff[3]: must be at least 0, got -1",
			},
		},
		{
			name: "tries 0",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, Tries: intPtr(0)})),
			want: []string{"fleet.supervisors.web.tries: must be at least 1, got 0"},
		},
		{
			name: "timeout 0",
			o:    opts(one(supervisor.SupervisorOptions{Queues: q, TimeoutSecs: intPtr(0)})),
			want: []string{"fleet.supervisors.web.timeout_secs: must be at least 1, got 0"},
		},
		{
			name: "empty name",
			o:    opts(map[string]supervisor.SupervisorOptions{"": {Queues: q}}),
			want: []string{`fleet.supervisors."": name must be non-empty and contain only letters, digits, '-' and '_'`},
		},
		{
			name: "name with a dot",
			o:    opts(map[string]supervisor.SupervisorOptions{"eu.west": {Queues: q}}),
			want: []string{`fleet.supervisors."eu.west": name must be non-empty and contain only letters, digits, '-' and '_'`},
		},
		{
			name: "name with a space and a later error",
			o:    opts(map[string]supervisor.SupervisorOptions{"a b": {Queues: q, Tries: intPtr(0)}}),
			want: []string{
				`fleet.supervisors."a b": name must be non-empty and contain only letters, digits, '-' and '_'`,
				`fleet.supervisors."a b".tries: must be at least 1, got 0`,
			},
		},
		{
			name: "non-ASCII name",
			o:    opts(map[string]supervisor.SupervisorOptions{"café": {Queues: q}}),
			want: []string{`fleet.supervisors."café": name must be non-empty and contain only letters, digits, '-' and '_'`},
		},
		{
			name: "one mistake is reported once: bad max skips the balance rule",
			o: opts(one(supervisor.SupervisorOptions{
				Queues: []string{"a", "b"}, MaxProcesses: intPtr(0),
			})),
			want: []string{"fleet.supervisors.web.max_processes: must be at least 1, got 0"},
		},
		{
			name: "many violations together, in a stable order",
			o: supervisor.Options{
				Driver:             "memory",
				DefaultConcurrency: 4,
				Only:               []string{"nope", "web"},
				Supervisors: map[string]supervisor.SupervisorOptions{
					"web": {
						Queues: []string{"a", "b", "c"}, MinProcesses: intPtr(2), MaxProcesses: intPtr(4),
						Concurrency: intPtr(-1), MaxJobs: -1, Tries: intPtr(0), Backoff: []int{-1}, TimeoutSecs: intPtr(-1),
					},
					"batch": {Queues: []string{"x", "x"}, Balance: "weighted"},
					"ok":    {Queues: []string{"a"}},
					"s":     {Queues: []string{"a", "b"}, Balance: "simple", MaxProcesses: intPtr(1)},
				},
			},
			want: []string{
				`queue.driver: the fleet master needs the "database" driver, got "memory"`,
				`fleet.supervisors.batch.queues[1]: duplicate queue "x" (also queues[0])`,
				`fleet.supervisors.batch.balance: must be auto, simple or off, got "weighted"`,
				`fleet.supervisors.s: balance "simple" needs max_processes ≥ queues (1 < 2)`,
				"fleet.supervisors.web.concurrency: must be at least 1, got -1",
				`fleet.supervisors.web: balance "auto" needs min_processes × queues ≤ max_processes (2 × 3 > 4)`,
				"fleet.supervisors.web.max_jobs: must be at least 0, got -1",
				"fleet.supervisors.web.tries: must be at least 1, got 0",
				"fleet.supervisors.web.backoff[0]: must be at least 0, got -1",
				"fleet.supervisors.web.timeout_secs: must be at least 1, got -1",
				`fleet.only: no supervisor named "nope" (have: batch, ok, s, web)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := supervisor.Resolve(tt.o)
			if err == nil {
				t.Fatalf("Resolve = %+v, want an error", got)
			}
			if got != nil {
				t.Errorf("Resolve returned %+v with an error", got)
			}
			lines := strings.Split(err.Error(), "\n")
			if !reflect.DeepEqual(lines, tt.want) {
				t.Errorf("error lines:\n  %s\nwant:\n  %s", strings.Join(lines, "\n  "), strings.Join(tt.want, "\n  "))
			}
			for _, l := range lines {
				if !strings.HasPrefix(l, "queue.driver: ") && !strings.HasPrefix(l, "fleet.supervisors.") && !strings.HasPrefix(l, "fleet.only: ") {
					t.Errorf("line %q does not start with a key path", l)
				}
			}
			// The same options give the same error, whatever the map order.
			for range 5 {
				if _, again := supervisor.Resolve(tt.o); again == nil || again.Error() != err.Error() {
					t.Fatalf("second Resolve error = %v, want %v", again, err)
				}
			}
		})
	}
}

func TestGroups(t *testing.T) {
	tests := []struct {
		name string
		sup  supervisor.Supervisor
		want []supervisor.Group
	}{
		{
			name: "auto: one group per queue",
			sup:  supervisor.Supervisor{Balance: supervisor.BalanceAuto, Queues: []string{"exports", "default"}},
			want: []supervisor.Group{
				{Key: "exports", Queues: []string{"exports"}},
				{Key: "default", Queues: []string{"default"}},
			},
		},
		{
			name: "simple: one group per queue",
			sup:  supervisor.Supervisor{Balance: supervisor.BalanceSimple, Queues: []string{"a", "b", "c"}},
			want: []supervisor.Group{
				{Key: "a", Queues: []string{"a"}},
				{Key: "b", Queues: []string{"b"}},
				{Key: "c", Queues: []string{"c"}},
			},
		},
		{
			name: "off: one group of all queues in priority order",
			sup:  supervisor.Supervisor{Balance: supervisor.BalanceOff, Queues: []string{"exports", "default"}},
			want: []supervisor.Group{{Key: "exports,default", Queues: []string{"exports", "default"}}},
		},
		{
			name: "off with one queue",
			sup:  supervisor.Supervisor{Balance: supervisor.BalanceOff, Queues: []string{"default"}},
			want: []supervisor.Group{{Key: "default", Queues: []string{"default"}}},
		},
		{
			name: "no queues: no groups",
			sup:  supervisor.Supervisor{Balance: supervisor.BalanceOff},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.sup.Groups()
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Groups = %+v, want %+v", got, tt.want)
			}
			// Groups' slices are the caller's to change.
			for _, g := range got {
				g.Queues[0] = "changed"
			}
			if len(tt.sup.Queues) > 0 && tt.sup.Queues[0] == "changed" {
				t.Errorf("Groups shares the supervisor's queues")
			}
		})
	}
}

// Groups of resolved supervisors, as the master sees them.
func TestResolvedGroups(t *testing.T) {
	sups, err := supervisor.Resolve(opts(map[string]supervisor.SupervisorOptions{
		"auto":   {Queues: []string{"a", "b"}},
		"off":    {Queues: []string{"exports", "default"}, Balance: "off"},
		"simple": {Queues: []string{"c", "d"}, Balance: "simple"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	var keys [][]string
	for _, s := range sups {
		var k []string
		for _, g := range s.Groups() {
			k = append(k, g.Key)
		}
		keys = append(keys, k)
	}
	want := [][]string{{"a", "b"}, {"exports,default"}, {"c", "d"}}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("group keys = %q, want %q", keys, want)
	}
}
