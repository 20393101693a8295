package model

import (
	"encoding/json"

	"github.com/fleet-go/fleet/supervisor"
)

// MasterReport is what a master reports in its membership row (the report
// column of fleet_members), beside its state: its supervisors, its
// throughput and memory, and its connection budget. The master writes it;
// fleet.Service.Masters, the commands, the dashboard, the metrics and the
// other masters read it. Keep it small: the membership caps its size.
type MasterReport struct {
	Supervisors []ReportedSupervisor `json:"supervisors"`
	// JobsPerMinute is the master's throughput over the last minute.
	JobsPerMinute float64 `json:"jobs_per_minute"`
	// MemoryMB is what its worker processes use.
	MemoryMB float64 `json:"memory_mb"`
	// Connections is the master's connection budget (absent when none is
	// set).
	Connections *supervisor.Budget `json:"connections,omitempty"`
}

// ReportedSupervisor is one supervisor as its master reports it.
type ReportedSupervisor struct {
	Name    string   `json:"name"`
	Queues  []string `json:"queues"`
	Balance string   `json:"balance"`
	Paused  bool     `json:"paused"`
	// Processes counts the processes of each group (a queue, or "a,b" for
	// a group working several) that are not stopping, 0 included.
	Processes map[string]int `json:"processes"`
	// Running counts every process of the supervisor, stopping ones
	// included: what the fleet-wide budget counts.
	Running int `json:"running"`
	// Claim is the ceiling the master may grow this supervisor to under
	// the fleet-wide budget (fleet.max_processes; absent without one).
	Claim *int `json:"claim,omitempty"`
}

// DecodeReport decodes a master's report. A report this release cannot
// read in full gives what it could read, and the error.
func DecodeReport(raw []byte) (MasterReport, error) {
	var r MasterReport
	err := json.Unmarshal(raw, &r)
	return r, err
}

// DecodeSupervisors decodes the supervisors of a report: the value of its
// "supervisors" key (as SupervisorsJSON returns it, or
// fleet.Master.Supervisors). A value this release cannot read gives none,
// and the error.
func DecodeSupervisors(raw []byte) ([]ReportedSupervisor, error) {
	var sups []ReportedSupervisor
	if err := json.Unmarshal(raw, &sups); err != nil {
		return nil, err
	}
	return sups, nil
}

// SupervisorsJSON returns the supervisors of a report as the master wrote
// them, undecoded: `[]` when the report has none or cannot be read.
func SupervisorsJSON(raw []byte) json.RawMessage {
	var r struct {
		Supervisors json.RawMessage `json:"supervisors"`
	}
	_ = json.Unmarshal(raw, &r) // unreadable: none
	if len(r.Supervisors) == 0 {
		return json.RawMessage(`[]`)
	}
	return r.Supervisors
}
