package supervisor

import (
	"fmt"
	"slices"
	"strings"
)

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
	// Limit, under a cap or within the server's room, is the most
	// processes the master keeps at once, those still finishing their
	// jobs after a rebalance or a recycle included (at least Processes);
	// 0 without either.
	Limit int `json:"limit,omitempty"`
	// Total is Master + Dashboard + Processes × Worker; under a cap, with
	// Limit for Processes, which keeps it at most Cap (or, when even the
	// minimums do not fit in the server's room, at most what they need).
	Total int `json:"total"`
	// Cap is the most the fleet may open: fleet.max_connections, or the
	// server's room when that is smaller (0: neither).
	Cap int `json:"cap,omitempty"`
	// Server is what the server had room for as the master started (nil:
	// not read, as behind a pooler).
	Server *Server `json:"server,omitempty"`
}

// Server is what PostgreSQL has room for, read as a process of the fleet
// starts: its max_connections, the slots reserved for superusers and
// privileged roles, the client sessions open, and the reserve fleet
// leaves free for the application (database.reserve_connections).
type Server struct {
	// MaxConnections is the server's max_connections.
	MaxConnections int `json:"max_connections"`
	// Reserved is superuser_reserved_connections plus, from PostgreSQL
	// 16, reserved_connections: slots an ordinary role never gets.
	Reserved int `json:"reserved"`
	// InUse is the client sessions open on the server (every database),
	// the reading process's own not counted.
	InUse int `json:"in_use"`
	// Reserve is what fleet leaves free for the application.
	Reserve int `json:"reserve"`
}

// Room is what the fleet may open: MaxConnections less Reserved, InUse
// and Reserve. It may be 0 or less on a server already full.
func (s Server) Room() int { return s.MaxConnections - s.Reserved - s.InUse - s.Reserve }

// String says how Room is made: "max_connections 12 − 3 reserved − 1 in
// use − 3 kept free (database.reserve_connections) = 5".
func (s Server) String() string {
	return fmt.Sprintf("max_connections %d − %d reserved − %d in use − %d kept free (database.reserve_connections) = %d",
		s.MaxConnections, s.Reserved, s.InUse, s.Reserve, s.Room())
}

// DefaultReserve is the reserve fleet leaves free for the application
// when database.reserve_connections is not set: a tenth of the server's
// max_connections, at least 3.
func DefaultReserve(maxConnections int) int { return max(3, maxConnections/10) }

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

// FitServer sizes the pools of a master running sups, as ConnectionBudget
// does, within what srv has room for, so that srv.Reserve stays free for
// the application. A fleet that fits is unchanged. One that does not
// degrades rather than fail, and warning says how, naming the numbers
// and the keys: first the pools shrink (the workers', then the master's
// and the dashboard's, down to their minimums), then the supervisors run
// fewer processes (each keeps one per process group, so that no queue
// goes unworked: its max_processes is lowered and, under balance "auto",
// its min_processes with it), and when even that does not fit, the fleet
// takes what its minimums need out of the reserve. It returns the
// supervisors to run (sups itself when unchanged) and their budget; an
// error only for what ConnectionBudget refuses of the configuration
// itself (a fleet.max_connections too small).
func FitServer(sups []Supervisor, o BudgetOptions, srv Server) (_ []Supervisor, _ Budget, warning string, _ error) {
	full, err := ConnectionBudget(sups, o)
	if err != nil {
		return nil, Budget{}, "", err
	}
	room := srv.Room()
	if full.Total <= room {
		// It fits. The room still bounds the processes kept at once: one
		// replaced after a recycle or a rebalance holds its connections
		// until it exits.
		full.Server = &srv
		if full.Limit == 0 {
			full.Limit = max(full.Processes, (room-full.Master-full.Dashboard)/full.Worker)
		}
		return sups, full, "", nil
	}
	limit := room
	if o.Cap > 0 {
		limit = min(limit, o.Cap)
	}
	shrunk := o
	shrunk.Cap = limit
	if limit > 0 {
		if b, err := ConnectionBudget(sups, shrunk); err == nil {
			b.Server = &srv
			return sups, b, fmt.Sprintf("the server has room for %d connections (%s), and this master and its %d worker processes would open %d: "+
				"the pools shrink to fit (the master %d, each worker %d); to keep them, raise max_connections or lower database.reserve_connections or max_processes",
				room, srv, full.Processes, full.Total, b.Master, b.Worker), nil
		}
	}
	why := fmt.Sprintf("the server has room for %d connections (%s), and this master and its %d worker processes would open %d",
		room, srv, full.Processes, full.Total)
	minMaster := MinMasterConnections
	if o.Dashboard {
		minMaster += MinDashboardConnections
	}
	floor := 0
	for _, s := range sups {
		floor += processFloor(s)
	}
	procs := max(floor, (limit-minMaster)/MinWorkerConnections)
	fitted := fewerProcesses(sups, procs)
	need := minMaster
	for _, s := range fitted {
		need += s.MaxProcesses * MinWorkerConnections
	}
	shrunk.Cap = max(limit, need)
	fb, err := ConnectionBudget(fitted, shrunk)
	if err != nil {
		return nil, Budget{}, "", err // cannot happen: the cap holds the minimums
	}
	fb.Server = &srv
	var cut []string
	for i, s := range fitted {
		if s.MaxProcesses < sups[i].MaxProcesses {
			cut = append(cut, fmt.Sprintf("%s %d of %d", s.Name, s.MaxProcesses, sups[i].MaxProcesses))
		}
	}
	if len(cut) > 0 {
		warning = fmt.Sprintf("%s: it runs fewer worker processes (max_processes of supervisor %s), each with %d connections and the master %d",
			why, strings.Join(cut, ", "), fb.Worker, fb.Master)
	} else {
		warning = fmt.Sprintf("%s: the pools shrink to their minimums (the master %d, each worker %d)", why, fb.Master, fb.Worker)
	}
	switch over := fb.Total - max(room, 0); {
	case over <= 0:
	case over <= srv.Reserve:
		warning += fmt.Sprintf(", %d in all: %d more than the room, taken from the %d kept free for the application", fb.Total, over, srv.Reserve)
	default:
		warning += fmt.Sprintf(", %d in all: all %d kept free for the application, and %d more than the server has free for it (those are refused, SQLSTATE 53300, and retried until sessions close)",
			fb.Total, srv.Reserve, over-srv.Reserve)
	}
	return fitted, fb, warning + "; raise max_connections, or lower database.reserve_connections or max_processes", nil
}

// processFloor is the fewest processes a supervisor may run without
// leaving a queue unworked: one per process group.
func processFloor(s Supervisor) int {
	return min(max(len(s.Groups()), 1), max(s.MaxProcesses, 0))
}

// fewerProcesses returns sups with their max_processes lowered to procs
// in all, when they add up to more: each keeps its floor (processFloor),
// and what is left is handed out one process at a time in turn, in
// their order (by name), up to each one's own max_processes. Under
// balance "auto" min_processes is lowered with it where it no longer
// fits.
func fewerProcesses(sups []Supervisor, procs int) []Supervisor {
	total := 0
	for _, s := range sups {
		total += s.MaxProcesses
	}
	if total <= procs {
		return sups
	}
	out := slices.Clone(sups)
	left := procs
	for i := range out {
		out[i].MaxProcesses = processFloor(sups[i])
		left -= out[i].MaxProcesses
	}
	for left > 0 {
		gave := false
		for i := range out {
			if left > 0 && out[i].MaxProcesses < sups[i].MaxProcesses {
				out[i].MaxProcesses++
				left--
				gave = true
			}
		}
		if !gave {
			break
		}
	}
	for i := range out {
		if q := len(out[i].Queues); q > 0 && out[i].MinProcesses*q > out[i].MaxProcesses {
			out[i].MinProcesses = max(1, out[i].MaxProcesses/q)
		}
	}
	return out
}
