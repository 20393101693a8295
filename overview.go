package fleet

import (
	"context"
	"encoding/json"
	"time"
)

// Overview is the fleet at a glance, as the dashboard's first page shows
// it.
type Overview struct {
	// At is the database's clock when the overview was read.
	At     time.Time `json:"at"`
	Status Status    `json:"status"`
	// JobsPerMinute sums every queue's attempts in the last complete
	// minute.
	JobsPerMinute float64 `json:"jobs_per_minute"`
	// JobsPastHour sums the attempts of the last hour's snapshots.
	JobsPastHour int64 `json:"jobs_past_hour"`
	// FailedPastWeek counts the failed jobs that failed in the last 7 days.
	FailedPastWeek int64 `json:"failed_past_7_days"`
	// Processes counts the worker processes of every live master.
	Processes int64 `json:"processes"`
	// Masters counts the live masters.
	Masters int `json:"masters"`
	// LongestWait is the queue whose oldest ready job has waited longest
	// (nil: no job is waiting).
	LongestWait *QueueWait `json:"longest_wait"`
	// Busiest is the queue with the most jobs in the last complete minute
	// (nil: none ran).
	Busiest *QueueThroughput `json:"busiest_queue"`
	// Slowest is the queue with the longest average runtime over the last 5
	// minutes (nil: none ran).
	Slowest *QueueRuntime `json:"slowest_queue"`
	Paused  Paused        `json:"paused"`
}

// QueueWait is a queue and the wait of its oldest ready job.
type QueueWait struct {
	Queue    string  `json:"queue"`
	WaitSecs float64 `json:"wait_secs"`
}

// QueueThroughput is a queue and its jobs per minute.
type QueueThroughput struct {
	Queue         string  `json:"queue"`
	JobsPerMinute float64 `json:"jobs_per_minute"`
}

// QueueRuntime is a queue and its average runtime.
type QueueRuntime struct {
	Queue        string  `json:"queue"`
	AvgRuntimeMs float64 `json:"avg_runtime_ms"`
}

// Overview reads the fleet at a glance: status, throughput, failures,
// processes, and the queues that stand out. Ties go to the first queue by
// name.
func (s *Service) Overview(ctx context.Context) (Overview, error) {
	counts, err := s.st.OverviewCountsGet(ctx)
	if err != nil {
		return Overview{}, err
	}
	v, err := s.Masters(ctx, false)
	if err != nil {
		return Overview{}, err
	}
	loads, err := s.Workload(ctx)
	if err != nil {
		return Overview{}, err
	}
	paused, err := s.PausedState(ctx)
	if err != nil {
		return Overview{}, err
	}
	o := Overview{
		At: counts.At, Status: StatusOf(v.Masters), JobsPastHour: counts.JobsPastHour,
		FailedPastWeek: counts.FailedPastWeek, Masters: len(v.Masters), Paused: paused,
	}
	for _, m := range v.Masters {
		o.Processes += MasterProcesses(m)
	}
	for _, l := range loads { // sorted by queue
		o.JobsPerMinute += l.JobsPerMinute
		if l.OldestWaitSecs > 0 && (o.LongestWait == nil || l.OldestWaitSecs > o.LongestWait.WaitSecs) {
			o.LongestWait = &QueueWait{Queue: l.Queue, WaitSecs: l.OldestWaitSecs}
		}
		if l.JobsPerMinute > 0 && (o.Busiest == nil || l.JobsPerMinute > o.Busiest.JobsPerMinute) {
			o.Busiest = &QueueThroughput{Queue: l.Queue, JobsPerMinute: l.JobsPerMinute}
		}
		if l.AvgRuntimeMs > 0 && (o.Slowest == nil || l.AvgRuntimeMs > o.Slowest.AvgRuntimeMs) {
			o.Slowest = &QueueRuntime{Queue: l.Queue, AvgRuntimeMs: l.AvgRuntimeMs}
		}
	}
	return o, nil
}

// MasterProcesses counts the worker processes a master reports (those
// not stopping), over its supervisors and groups.
func MasterProcesses(m Master) int64 {
	var sups []struct {
		Processes map[string]int64 `json:"processes"`
	}
	_ = json.Unmarshal(m.Supervisors, &sups) // an unreadable report counts none
	var n int64
	for _, s := range sups {
		for _, p := range s.Processes {
			n += p
		}
	}
	return n
}
