package master

import (
	"sync/atomic"

	"github.com/fleet-go/fleet/model"
)

// status is the mailbox from supervision to the membership's beat and to
// Readiness: the state and report supervision last published. Only
// supervision writes it (and New, before any service starts); anyone
// reads it.
type status struct {
	report atomic.Pointer[model.MasterReport]
	state  atomic.Value // string
}

// load returns the last state and report.
func (s *status) load() (string, *model.MasterReport) {
	st, _ := s.state.Load().(string)
	return st, s.report.Load()
}

// reportedSup finds supervisor name in a master's report.
func reportedSup(raw []byte, name string) (model.ReportedSupervisor, bool) {
	r, err := model.DecodeReport(raw)
	if err != nil {
		return model.ReportedSupervisor{}, false
	}
	for _, s := range r.Supervisors {
		if s.Name == name {
			return s, true
		}
	}
	return model.ReportedSupervisor{}, false
}

// pauseChanged reports whether a supervisor's pause flag differs between
// two reports.
func pauseChanged(a, b *model.MasterReport) bool {
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
