package supervisor

import "fmt"

// Connections a process of the fleet opens at most, when nothing caps
// them. A worker's need does not grow with its concurrency: its pool of
// three has one connection that claims, one that writes outcomes and one
// for cancel checks and the occasional vacuum, and a connection of its
// own stays in LISTEN; its handlers use the application's own pool. The
// master's loops (the beat, housekeeping and duties, the shared state,
// /metrics) share a pool of four, and its dashboard reads on a pool of two
// of its own, so that a burst of page loads never delays a beat.
const (
	MasterConnections    = 4
	DashboardConnections = 2
	WorkerConnections    = 4 // a pool of 3 and the listener
	// The least each can work with: a worker's listener and one pooled
	// connection its claims and writes take turns on; a master's beat and
	// one for the rest; one for the dashboard.
	MinMasterConnections    = 2
	MinDashboardConnections = 1
	MinWorkerConnections    = 2
)

// Budget is the most connections one master's fleet opens to PostgreSQL:
// the master's pools plus each of its worker processes'.
type Budget struct {
	// Master is the size of the master's pool.
	Master int `json:"master"`
	// Dashboard is the size of the dashboard's pool (0: no dashboard).
	Dashboard int `json:"dashboard"`
	// Worker is what each worker process opens: its pool (Worker - 1)
	// and its listener.
	Worker int `json:"worker"`
	// Processes is the most worker processes the supervisors run at once
	// (the sum of their max_processes).
	Processes int `json:"processes"`
	// Limit, under a cap, is the most processes the master keeps at once,
	// those still finishing their jobs after a rebalance or a recycle
	// included (at least Processes); 0 without a cap.
	Limit int `json:"limit,omitempty"`
	// Total is Master + Dashboard + Processes × Worker; under a cap, with
	// Limit for Processes, which keeps it at most Cap.
	Total int `json:"total"`
	// Cap is fleet.max_connections (0: none).
	Cap int `json:"cap,omitempty"`
}

// BudgetOptions are what a budget is derived from.
type BudgetOptions struct {
	// Pool is database.max_conns, the size of every process's pool (0: the
	// defaults above).
	Pool int
	// Cap is fleet.max_connections (0: none).
	Cap int
	// Dashboard says the master serves its dashboard.
	Dashboard bool
}

// ConnectionBudget sizes the pools of a master running sups. Under a cap,
// the workers' pools shrink first, then the master's, down to the
// minimums, until the master and the most processes its supervisors may
// run fit in it; it fails, naming the key, when even the minimums do not
// fit.
func ConnectionBudget(sups []Supervisor, o BudgetOptions) (Budget, error) {
	b := Budget{Master: MasterConnections, Worker: WorkerConnections, Cap: o.Cap}
	if o.Pool > 0 {
		b.Master, b.Worker = max(o.Pool, MinMasterConnections), o.Pool+1
	}
	if o.Dashboard {
		b.Dashboard = DashboardConnections
	}
	for _, s := range sups {
		b.Processes += s.MaxProcesses
	}
	b.Total = b.Master + b.Dashboard + b.Processes*b.Worker
	if o.Cap <= 0 {
		return b, nil
	}
	minMaster := MinMasterConnections
	if o.Dashboard {
		minMaster += MinDashboardConnections
	}
	if need := minMaster + b.Processes*MinWorkerConnections; o.Cap < need {
		return Budget{}, fmt.Errorf("fleet.max_connections: %d is too few for this master and %d worker processes (the sum of the supervisors' max_processes): "+
			"each process needs at least %d connections and the master %d, so at least %d; raise it or lower max_processes",
			o.Cap, b.Processes, MinWorkerConnections, minMaster, need)
	}
	if b.Total > o.Cap && b.Processes > 0 {
		b.Worker = max(MinWorkerConnections, min(b.Worker, (o.Cap-b.Master-b.Dashboard)/b.Processes))
	}
	// What the workers leave goes to the master, its pool first.
	left := o.Cap - b.Processes*b.Worker
	if b.Master+b.Dashboard > left {
		if o.Dashboard {
			b.Dashboard = max(MinDashboardConnections, min(b.Dashboard, left-b.Master))
		}
		b.Master = min(b.Master, left-b.Dashboard)
	}
	b.Limit = max(b.Processes, (o.Cap-b.Master-b.Dashboard)/b.Worker)
	b.Total = b.Master + b.Dashboard + b.Limit*b.Worker
	return b, nil
}

// WorkerPool is the size of each worker's pool: what it opens but its
// listener.
func (b Budget) WorkerPool() int { return b.Worker - 1 }
