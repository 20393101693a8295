package master

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fleet-go/fleet/model"
)

// Readiness is what a readiness probe asks of a master: is its row fresh
// in the fleet's view, and does every supervisor have its processes.
type Readiness struct {
	// Ready is true while the master is past starting and not draining,
	// every group of every supervisor has its processes (at least one,
	// or its share under a fleet-wide budget), and its last successful
	// beat is younger than its ttl.
	Ready bool `json:"ready"`
	// Reason says why not, in a few words; empty when ready.
	Reason string `json:"reason,omitempty"`
	// State is the state the master beats: starting, running, paused or
	// draining.
	State string `json:"state"`
	// ViewAge is the time since the last successful beat (0 before the
	// first one), TTL the time after which its row expires.
	ViewAgeSecs float64 `json:"view_age_secs"`
	TTLSecs     float64 `json:"ttl_secs"`
	// Processes counts, per supervisor and group, the processes that are
	// not stopping, as last published for the beat.
	Processes map[string]map[string]int `json:"processes"`
}

// short says which group of a supervisor lacks its processes, or "" when
// none does. Without a fleet-wide budget every group runs at least one
// process (auto: min_processes >= 1 per queue; simple: max_processes >=
// queues; off: one group); under a budget the supervisor needs as many
// processes as its claimed share allows, up to one per group.
func short(s model.ReportedSupervisor) string {
	if s.Claim != nil {
		total := 0
		for _, n := range s.Processes {
			total += n
		}
		if want := min(*s.Claim, len(s.Processes)); total < want {
			return fmt.Sprintf("supervisor %s has %d of its %d processes", s.Name, total, want)
		}
		return ""
	}
	for _, g := range slices.Sorted(maps.Keys(s.Processes)) {
		if s.Processes[g] < 1 {
			return fmt.Sprintf("supervisor %s group %s has no process", s.Name, g)
		}
	}
	return ""
}

// Readiness reports whether the master is ready. It is safe to call from
// any goroutine: it reads only what the master publishes for its beat.
func (m *Master) Readiness() Readiness {
	state, rep := m.status.load()
	age, ttl := m.member.ViewAge(), m.member.TTL()
	r := Readiness{
		State:       state,
		ViewAgeSecs: age.Round(time.Millisecond).Seconds(),
		TTLSecs:     ttl.Seconds(),
		Processes:   map[string]map[string]int{},
	}
	missing := ""
	if rep != nil {
		for _, s := range rep.Supervisors {
			r.Processes[s.Name] = maps.Clone(s.Processes)
			if missing == "" {
				missing = short(s)
			}
		}
	}
	switch {
	case state == "" || state == "starting":
		r.Reason = "starting: not every supervisor has had its processes yet"
	case missing != "":
		r.Reason = missing
	case state == "draining":
		r.Reason = "draining: the master is stopping"
	case age <= 0:
		r.Reason = "no successful beat yet"
	case age >= ttl:
		r.Reason = fmt.Sprintf("last successful beat %.1fs ago, not within the ttl of %s", age.Seconds(), ttl)
	default:
		r.Ready = true
	}
	return r
}
