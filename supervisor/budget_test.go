package supervisor

import (
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
