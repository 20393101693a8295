package supervisor

import (
	"slices"
	"strings"
	"testing"
)

func TestConnectionBudget(t *testing.T) {
	sups := func(procs ...int) []Supervisor {
		var out []Supervisor
		for _, p := range procs {
			out = append(out, Supervisor{MaxProcesses: p})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		sups    []Supervisor
		opts    BudgetOptions
		want    Budget
		wantErr string
	}{
		{name: "defaults", sups: sups(4, 4), opts: BudgetOptions{Dashboard: true},
			want: Budget{Master: 4, Dashboard: 2, Worker: 4, Processes: 8, Total: 38}},
		{name: "database.max_conns", sups: sups(2), opts: BudgetOptions{Pool: 6},
			want: Budget{Master: 6, Worker: 7, Processes: 2, Total: 20}},
		{name: "cap with room", sups: sups(2), opts: BudgetOptions{Cap: 20},
			want: Budget{Master: 4, Worker: 4, Processes: 2, Limit: 4, Total: 20, Cap: 20}},
		{name: "the workers' pools shrink first", sups: sups(4), opts: BudgetOptions{Cap: 18, Dashboard: true},
			want: Budget{Master: 4, Dashboard: 2, Worker: 3, Processes: 4, Limit: 4, Total: 18, Cap: 18}},
		// A server with max_connections = 20 has 17 for ordinary roles: a
		// master of 6 processes capped at 14 leaves the application three.
		{name: "then the master's", sups: sups(6), opts: BudgetOptions{Cap: 14},
			want: Budget{Master: 2, Worker: 2, Processes: 6, Limit: 6, Total: 14, Cap: 14}},
		{name: "the dashboard's too", sups: sups(6), opts: BudgetOptions{Cap: 15, Dashboard: true},
			want: Budget{Master: 2, Dashboard: 1, Worker: 2, Processes: 6, Limit: 6, Total: 15, Cap: 15}},
		{name: "too few", sups: sups(8), opts: BudgetOptions{Cap: 17}, wantErr: "fleet.max_connections: 17 is too few for this master and 8 worker processes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConnectionBudget(tc.sups, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if got.Cap > 0 && got.Total > got.Cap {
				t.Fatalf("total %d over the cap %d", got.Total, got.Cap)
			}
		})
	}
}

// Under any cap the budget either fits in it or is refused, and never
// gives a process less than its minimum.
func TestConnectionBudgetFits(t *testing.T) {
	for procs := 1; procs <= 20; procs++ {
		for pool := 0; pool <= 8; pool++ {
			for _, dash := range []bool{false, true} {
				for c := 1; c <= 120; c++ {
					b, err := ConnectionBudget([]Supervisor{{MaxProcesses: procs}}, BudgetOptions{Pool: pool, Cap: c, Dashboard: dash})
					if err != nil {
						continue
					}
					if b.Total > c || b.Worker < MinWorkerConnections || b.Master < MinMasterConnections ||
						(dash && b.Dashboard < MinDashboardConnections) || b.Limit < procs {
						t.Fatalf("procs %d pool %d cap %d dashboard %v: %+v", procs, pool, c, dash, b)
					}
				}
			}
		}
	}
}

func TestFitServer(t *testing.T) {
	work := func(procs int, queues ...string) Supervisor {
		return Supervisor{Name: "work", Queues: queues, Balance: BalanceOff, MaxProcesses: procs, MinProcesses: 1}
	}
	// max_connections 12 less 3 reserved, 1 in use and the default reserve
	// of 3: room for 5.
	srv12 := Server{MaxConnections: 12, Reserved: 3, InUse: 1, Reserve: DefaultReserve(12)}
	if srv12.Room() != 5 {
		t.Fatalf("room %d, want 5", srv12.Room())
	}
	for _, tc := range []struct {
		name      string
		sups      []Supervisor
		opts      BudgetOptions
		srv       Server
		want      Budget // Server is not compared
		procs     []int  // max_processes after
		warn      []string
		wantNoWrn bool
	}{
		{name: "fits", sups: []Supervisor{work(2, "default")}, srv: Server{MaxConnections: 100, Reserved: 3, InUse: 20, Reserve: 10},
			want: Budget{Master: 4, Worker: 4, Processes: 2, Limit: 15, Total: 12}, procs: []int{2}, wantNoWrn: true},
		{name: "fits exactly", sups: []Supervisor{work(2, "default")}, srv: Server{MaxConnections: 20, Reserved: 3, InUse: 2, Reserve: 3},
			want: Budget{Master: 4, Worker: 4, Processes: 2, Limit: 2, Total: 12}, procs: []int{2}, wantNoWrn: true},
		{name: "the pools shrink to their minimums", sups: []Supervisor{work(2, "default")}, srv: Server{MaxConnections: 16, Reserved: 3, InUse: 1, Reserve: 3},
			want:  Budget{Master: 4, Worker: 2, Processes: 2, Limit: 2, Total: 8, Cap: 9},
			procs: []int{2}, warn: []string{"room for 9 connections", "max_connections 16 − 3 reserved − 1 in use − 3 kept free (database.reserve_connections) = 9", "would open 12", "the pools shrink to fit (the master 4, each worker 2)"}},
		{name: "fewer processes", sups: []Supervisor{work(2, "default")}, srv: srv12,
			want: Budget{Master: 3, Worker: 2, Processes: 1, Limit: 1, Total: 5, Cap: 5}, procs: []int{1},
			warn: []string{"room for 5 connections", "fewer worker processes (max_processes of supervisor work 1 of 2)", "database.reserve_connections"}},
		{name: "into the reserve", sups: []Supervisor{work(2, "default")}, srv: Server{MaxConnections: 7, Reserved: 3, InUse: 1, Reserve: 3},
			want: Budget{Master: 2, Worker: 2, Processes: 1, Limit: 1, Total: 4, Cap: 4}, procs: []int{1},
			warn: []string{"room for 0 connections", "4 in all: all 3 kept free for the application, and 1 more than the server has free for it"}},
		{name: "no process to spare", sups: []Supervisor{work(1, "default")}, srv: Server{MaxConnections: 8, Reserved: 3, InUse: 1, Reserve: 3},
			want: Budget{Master: 2, Worker: 2, Processes: 1, Limit: 1, Total: 4, Cap: 4}, procs: []int{1},
			warn: []string{"would open 8: the pools shrink to their minimums (the master 2, each worker 2), 4 in all: 3 more than the room"}},
		{name: "into the reserve, not past it", sups: []Supervisor{work(2, "default")}, srv: Server{MaxConnections: 8, Reserved: 3, InUse: 1, Reserve: 3},
			want: Budget{Master: 2, Worker: 2, Processes: 1, Limit: 1, Total: 4, Cap: 4}, procs: []int{1},
			warn: []string{"room for 1 connections", "4 in all: 3 more than the room, taken from the 3 kept free for the application"}},
		{name: "one process per queue", sups: []Supervisor{{Name: "a", Queues: []string{"x", "y", "z"}, Balance: BalanceAuto, MinProcesses: 2, MaxProcesses: 8}, work(4, "default")},
			opts: BudgetOptions{Dashboard: true}, srv: Server{MaxConnections: 30, Reserved: 3, InUse: 5, Reserve: 3},
			want: Budget{Master: 2, Dashboard: 1, Worker: 2, Processes: 8, Limit: 8, Total: 19, Cap: 19}, procs: []int{5, 3},
			warn: []string{"a 5 of 8, work 3 of 4"}},
		{name: "fleet.max_connections smaller than the room", sups: []Supervisor{work(2, "default")}, opts: BudgetOptions{Cap: 6},
			srv:  Server{MaxConnections: 100, Reserved: 3, InUse: 20, Reserve: 3},
			want: Budget{Master: 2, Worker: 2, Processes: 2, Limit: 2, Total: 6, Cap: 6}, procs: []int{2}, wantNoWrn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fitted, got, warning, err := FitServer(tc.sups, tc.opts, tc.srv)
			if err != nil {
				t.Fatal(err)
			}
			if got.Server == nil || *got.Server != tc.srv {
				t.Errorf("server %+v, want %+v", got.Server, tc.srv)
			}
			got.Server = nil
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			var procs []int
			for _, s := range fitted {
				procs = append(procs, s.MaxProcesses)
				if q := len(s.Queues); s.Balance == BalanceAuto && s.MinProcesses*q > s.MaxProcesses {
					t.Errorf("supervisor %s: min_processes %d × %d queues over max_processes %d", s.Name, s.MinProcesses, q, s.MaxProcesses)
				}
			}
			if !slices.Equal(procs, tc.procs) {
				t.Errorf("max_processes %v, want %v", procs, tc.procs)
			}
			if tc.wantNoWrn != (warning == "") {
				t.Errorf("warning %q", warning)
			}
			for _, w := range tc.warn {
				if !strings.Contains(warning, w) {
					t.Errorf("warning %q lacks %q", warning, w)
				}
			}
		})
	}
}

// Whatever the server's room, the fitted budget gives every process at
// least its minimum, keeps a process per group, and stays within the room
// unless the minimums themselves do not fit; the warning is there exactly
// when the configured budget did not fit.
func TestFitServerAlwaysRuns(t *testing.T) {
	sups := []Supervisor{
		{Name: "a", Queues: []string{"x", "y"}, Balance: BalanceAuto, MinProcesses: 1, MaxProcesses: 6},
		{Name: "b", Queues: []string{"z"}, Balance: BalanceOff, MaxProcesses: 3},
	}
	for room := -5; room <= 60; room++ {
		for _, dash := range []bool{false, true} {
			srv := Server{MaxConnections: 100, Reserved: 3, Reserve: 10, InUse: 87 - room}
			o := BudgetOptions{Dashboard: dash}
			full, _ := ConnectionBudget(sups, o)
			fitted, b, warning, err := FitServer(sups, o, srv)
			if err != nil {
				t.Fatalf("room %d: %v", room, err)
			}
			procs := 0
			for i, s := range fitted {
				procs += s.MaxProcesses
				if s.MaxProcesses < len(s.Groups()) || s.MaxProcesses > sups[i].MaxProcesses {
					t.Fatalf("room %d: supervisor %s runs %d processes", room, s.Name, s.MaxProcesses)
				}
			}
			minimums := MinMasterConnections + procs*MinWorkerConnections
			if dash {
				minimums += MinDashboardConnections
			}
			if b.Worker < MinWorkerConnections || b.Master < MinMasterConnections || b.Limit < procs || b.Processes != procs ||
				(b.Total > room && b.Total > minimums) {
				t.Fatalf("room %d dashboard %v: %+v", room, dash, b)
			}
			if (warning != "") != (full.Total > room) {
				t.Fatalf("room %d: budget %d, warning %q", room, full.Total, warning)
			}
		}
	}
}
