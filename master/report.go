package master

import (
	"encoding/json"
	"sync/atomic"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/supervisor"
)

// status is the mailbox from supervision to the membership's beat and to
// Readiness: the state and report supervision last published. Only
// supervision writes it (and New, before any service starts); anyone
// reads it.
type status struct {
	report atomic.Pointer[masterReport]
	state  atomic.Value // string
}

// load returns the last state and report.
func (s *status) load() (string, *masterReport) {
	st, _ := s.state.Load().(string)
	return st, s.report.Load()
}

// masterReport is the report in the master's row: small, and capped by
// the membership service.
type masterReport struct {
	Supervisors   []supRow `json:"supervisors"`
	JobsPerMinute float64  `json:"jobs_per_minute"`
	MemoryMB      float64  `json:"memory_mb"`
	// Connections is the budget of Settings.Connections (absent when
	// none is set).
	Connections *supervisor.Budget `json:"connections,omitempty"`
}

// supRow is one supervisor of the report: what every reader decodes
// (fleet.ReportedSupervisor) and what only masters read.
type supRow struct {
	fleet.ReportedSupervisor
	// Claim is the ceiling this master may grow to under the fleet-wide
	// budget (absent without one).
	Claim *int `json:"claim,omitempty"`
}

// reportedSup finds supervisor name in a master's report.
func reportedSup(raw []byte, name string) (supRow, bool) {
	var r masterReport
	if err := json.Unmarshal(raw, &r); err != nil {
		return supRow{}, false
	}
	for _, s := range r.Supervisors {
		if s.Name == name {
			return s, true
		}
	}
	return supRow{}, false
}

// pauseChanged reports whether a supervisor's pause flag differs between
// two reports.
func pauseChanged(a, b *masterReport) bool {
	if a == nil || b == nil || len(a.Supervisors) != len(b.Supervisors) {
		return a != b
	}
	for i := range a.Supervisors {
		if a.Supervisors[i].Paused != b.Supervisors[i].Paused {
			return true
		}
	}
	return false
}
