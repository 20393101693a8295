// Package fleet is the Go API over a running fleet: pause and resume,
// status, masters, workload, long waits, failed jobs, job lists and metrics.
// Everything it answers comes from PostgreSQL, so it works from any process
// that can reach the database: the commands, the dashboard, or your app.
package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/decide"
	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/periodic"
	fleetqueue "github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/redact"
	"github.com/fleet-go/fleet/store"
	"github.com/fleet-go/fleet/supervisor"
)

// Options configure a Service.
type Options struct {
	// LongWait maps a queue to the wait in seconds that counts as long (0:
	// off).
	LongWait map[string]int
	// Redact lists payload field-name fragments to hide in results meant for
	// display (default redact.DefaultFragments).
	Redact []string
	// Supervisors names the supervisors of the app's configuration: with
	// those the live masters report, the ones Pause accepts by name.
	Supervisors []string
	// Periodic are the app's periodic schedules, of its configuration and
	// of its code, as its masters run them: those PeriodicSchedules
	// returns, which the dashboard lists.
	Periodic []periodic.Schedule
	// Now is the clock of what the Service reports and decides by the time
	// (nil: the database's now(), as in production): the counts, waits and
	// runtimes of Workload and Overview, LongWaits, and the window of
	// Metrics. A test sets it (fleettest.Clock) to see them as they would
	// be at that time. Dispatch, the workers' claims and finishes, and
	// liveness keep the database's clock: a job is available from the
	// database's now() when dispatched, so a test clock is set at or after
	// it (see store.Store.WithClock for the whole list).
	Now func() time.Time
}

// Service answers questions about the fleet and changes its shared state.
type Service struct {
	st          *store.Store
	now         func() time.Time // Options.Now, else time.Now
	longWait    map[string]int
	redactor    *redact.Redactor
	supervisors []string
	periodic    []periodic.Schedule
}

// New returns a Service on pool.
func New(pool *pgxpool.Pool, opts Options) *Service {
	fragments := opts.Redact
	if fragments == nil {
		fragments = redact.DefaultFragments
	}
	st, now := store.New(pool), time.Now
	if opts.Now != nil {
		st, now = st.WithClock(opts.Now), opts.Now
	}
	return &Service{
		st: st, now: now, longWait: opts.LongWait, redactor: redact.New(fragments), supervisors: opts.Supervisors,
		periodic: slices.Clone(opts.Periodic),
	}
}

// FromConfig returns a Service configured from the app's configuration:
// New with ConfigOptions.
func FromConfig(pool *pgxpool.Pool, cfg *config.Config) *Service {
	return New(pool, ConfigOptions(cfg))
}

// ConfigOptions returns the Options of the app's configuration. Periodic
// is left empty: the schedules need the app's registry too (the commands
// set it).
func ConfigOptions(cfg *config.Config) Options {
	sups := slices.Sorted(maps.Keys(cfg.Fleet.Supervisors))
	if len(sups) == 0 {
		sups = []string{supervisor.DefaultName} // the one a master runs without any
	}
	return Options{LongWait: cfg.Fleet.LongWait, Redact: cfg.Log.Redact, Supervisors: sups}
}

// Pause pauses one supervisor, or every supervisor when name is empty:
// running jobs finish, no new job starts. Every master applies it within a
// tick, and it survives restarts. A supervisor name must be known (see
// Supervisors): pausing an unknown one fails with ErrUnknownSupervisor and
// stores nothing.
func (s *Service) Pause(ctx context.Context, supervisor string) error {
	if supervisor == "" {
		return s.st.StateSet(ctx, store.StatePauseAll)
	}
	if err := s.knownSupervisor(ctx, supervisor); err != nil {
		return err
	}
	return s.st.StateSet(ctx, store.StatePauseSupervisorPrefix+supervisor)
}

// Resume resumes one supervisor, or every supervisor when name is empty.
//
// Resuming one supervisor while every supervisor is paused is refused with
// ErrAllPaused and changes nothing: the fleet-wide pause would still hold
// it, and a refused command must not half-apply (its own pause, if any,
// stays). To run only some supervisors, resume all, then pause the others
// by name. A supervisor that is neither known (see Supervisors) nor paused
// fails with ErrUnknownSupervisor; a stale pause of one no longer
// configured can still be lifted.
func (s *Service) Resume(ctx context.Context, supervisor string) error {
	if supervisor == "" {
		if _, err := s.st.StateDelete(ctx, store.StatePauseAll); err != nil {
			return err
		}
		_, err := s.st.StateDeletePrefix(ctx, store.StatePauseSupervisorPrefix)
		return err
	}
	deleted, blocked, err := s.st.StateDeleteUnless(ctx, store.StatePauseSupervisorPrefix+supervisor, store.StatePauseAll)
	switch {
	case err != nil:
		return err
	case blocked:
		return ErrAllPaused
	case deleted:
		return nil
	}
	return s.knownSupervisor(ctx, supervisor)
}

// ErrAllPaused is returned when resuming one supervisor while every
// supervisor is paused.
var ErrAllPaused = errors.New("every supervisor is paused: resume them all (no name) instead, then pause the others by name")

// ErrUnknownSupervisor is returned for a supervisor name that neither the
// Service's configuration (Options.Supervisors) nor any live master knows.
var ErrUnknownSupervisor = errors.New("no such supervisor")

// Supervisors returns the names of the supervisors the Service knows,
// sorted: those of its configuration (Options.Supervisors) and those
// every live master reports.
func (s *Service) Supervisors(ctx context.Context) ([]string, error) {
	names := map[string]bool{}
	for _, n := range s.supervisors {
		names[n] = true
	}
	v, err := s.Masters(ctx, false)
	if err != nil {
		return nil, err
	}
	for _, m := range v.Masters {
		for _, sp := range m.ReportedSupervisors() {
			names[sp.Name] = true
		}
	}
	return slices.Sorted(maps.Keys(names)), nil
}

func (s *Service) knownSupervisor(ctx context.Context, name string) error {
	known, err := s.Supervisors(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(known, name) {
		return nil
	}
	have := "none: no live master reports one and the configuration names none"
	if len(known) > 0 {
		have = strings.Join(known, ", ")
	}
	return fmt.Errorf("%w named %q (known: %s)", ErrUnknownSupervisor, name, have)
}

// PauseQueue pauses one queue in every supervisor that works it.
func (s *Service) PauseQueue(ctx context.Context, queue string) error {
	if err := fleetqueue.CheckQueue("queue", queue); err != nil {
		return err
	}
	return s.st.StateSet(ctx, store.StatePauseQueuePrefix+queue)
}

// ResumeQueue resumes a paused queue.
func (s *Service) ResumeQueue(ctx context.Context, queue string) error {
	if err := fleetqueue.CheckQueue("queue", queue); err != nil {
		return err
	}
	_, err := s.st.StateDelete(ctx, store.StatePauseQueuePrefix+queue)
	return err
}

// Paused is what is paused right now.
type Paused struct {
	All         bool     `json:"all"`
	Supervisors []string `json:"supervisors"`
	Queues      []string `json:"queues"`
}

// PausedState reads what is paused.
func (s *Service) PausedState(ctx context.Context) (Paused, error) {
	rows, err := s.st.StateList(ctx, "pause:")
	if err != nil {
		return Paused{}, err
	}
	p := Paused{Supervisors: []string{}, Queues: []string{}}
	for _, r := range rows {
		if r.Key == store.StatePauseAll {
			p.All = true
		} else if name, ok := strings.CutPrefix(r.Key, store.StatePauseSupervisorPrefix); ok {
			p.Supervisors = append(p.Supervisors, name)
		} else if name, ok := strings.CutPrefix(r.Key, store.StatePauseQueuePrefix); ok {
			p.Queues = append(p.Queues, name)
		}
	}
	return p, nil
}

// Status is the fleet's state.
type Status string

// Statuses.
const (
	// StatusRunning: at least one master is live (online or draining)
	// and not every live one is paused.
	StatusRunning Status = "Running"
	// StatusPaused: every live master is paused.
	StatusPaused Status = "Paused"
	// StatusInactive: no master is live.
	StatusInactive Status = "Inactive"
)

// Status reports Running, Paused or Inactive.
func (s *Service) Status(ctx context.Context) (Status, error) {
	v, err := s.Masters(ctx, false)
	if err != nil {
		return "", err
	}
	return StatusOf(v.Masters), nil
}

// StatusOf decides the status from live masters.
func StatusOf(masters []Master) Status {
	live := 0
	for _, m := range masters {
		if m.Liveness == store.LivenessOffline {
			continue
		}
		live++
		if m.State != "paused" {
			return StatusRunning
		}
	}
	if live == 0 {
		return StatusInactive
	}
	return StatusPaused
}

// Master is one master as the membership shows it. Liveness is online,
// draining or offline, measured against the view's database clock.
type Master struct {
	Name          string          `json:"name"`
	Instance      string          `json:"instance"`
	Host          string          `json:"host"`
	PID           int             `json:"pid"`
	Version       string          `json:"version"`
	State         string          `json:"state"`
	Liveness      string          `json:"liveness"`
	StartedAt     time.Time       `json:"started_at"`
	BeatAt        time.Time       `json:"beat_at"`
	ExpiresAt     time.Time       `json:"expires_at"`
	BeatAgeSecs   float64         `json:"beat_age_secs"`
	Supervisors   json.RawMessage `json:"supervisors"`
	JobsPerMinute float64         `json:"jobs_per_minute"`
	MemoryMB      float64         `json:"memory_mb"`
	// Connections is the master's connection budget and what it and its
	// workers hold open now (nil for a master that reports no budget).
	Connections *Connections `json:"connections,omitempty"`
}

// Connections is one master's connections to PostgreSQL: its budget (see
// fleet.max_connections in the configuration docs) and the sessions open
// now under its name and its workers' (counted by application_name in
// pg_stat_activity: "fleet master NAME", "fleet:work NAME/...").
type Connections struct {
	// Open is how many are open now.
	Open int `json:"open"`
	// Total is the most the master and its workers open together.
	Total int `json:"total"`
	// Master, Dashboard and Worker are the pool sizes of the master, its
	// dashboard and each worker (a worker's count includes its LISTEN
	// connection).
	Master    int `json:"master"`
	Dashboard int `json:"dashboard"`
	Worker    int `json:"worker"`
	// Processes is the most worker processes its supervisors run; Limit,
	// under a cap, the most it keeps at once, stopping ones included.
	Processes int `json:"processes"`
	Limit     int `json:"limit,omitempty"`
	// Cap is fleet.max_connections (0: none).
	Cap int `json:"cap,omitempty"`
}

// connectionsOf is the reported budget b without the count of open
// sessions, which Masters adds (nil without a budget).
func connectionsOf(b *supervisor.Budget) *Connections {
	if b == nil {
		return nil
	}
	return &Connections{
		Total: b.Total, Master: b.Master, Dashboard: b.Dashboard, Worker: b.Worker,
		Processes: b.Processes, Limit: b.Limit, Cap: b.Cap,
	}
}

// HostConnections sums the connections of the live masters of one host.
type HostConnections struct {
	Host  string `json:"host"`
	Open  int    `json:"open"`
	Total int    `json:"total"`
}

// ReportedSupervisors decodes the master's supervisors; a report this
// release cannot read gives none.
func (m Master) ReportedSupervisors() []ReportedSupervisor {
	sups, _ := model.DecodeSupervisors(m.Supervisors)
	return sups
}

// MastersView is the masters at one moment of the database clock.
type MastersView struct {
	// At is the database's now() when the view was read.
	At time.Time `json:"at"`
	// Masters are sorted by name.
	Masters []Master `json:"masters"`
	// Hosts sums the connections of the live masters per host, sorted by
	// host.
	Hosts []HostConnections `json:"hosts"`
}

// Masters returns the live masters (online or draining) sorted by name,
// with the database time the view was read at; with all, the recently gone
// (offline, for 10 minutes after their last beat) too.
func (s *Service) Masters(ctx context.Context, all bool) (MastersView, error) {
	v, err := s.st.MemberView(ctx)
	if err != nil {
		return MastersView{}, err
	}
	out := MastersView{At: v.At, Masters: []Master{}}
	for _, m := range v.Members {
		if m.Kind != store.KindMaster || (!all && !m.Live(v.At)) {
			continue
		}
		r, _ := model.DecodeReport(m.Report) // what a report this version cannot read holds shows as empty
		out.Masters = append(out.Masters, Master{
			Name: m.Name, Instance: m.Instance, Host: m.Host, PID: m.PID, Version: m.Version, State: m.State,
			Liveness: m.Liveness(v.At), StartedAt: m.StartedAt, BeatAt: m.BeatAt, ExpiresAt: m.ExpiresAt,
			BeatAgeSecs: v.At.Sub(m.BeatAt).Seconds(), Supervisors: model.SupervisorsJSON(m.Report),
			JobsPerMinute: r.JobsPerMinute, MemoryMB: r.MemoryMB, Connections: connectionsOf(r.Connections),
		})
	}
	out.Hosts = []HostConnections{}
	if len(out.Masters) == 0 {
		return out, nil
	}
	sessions, err := s.st.SessionsByApp(ctx, "fleet")
	if err != nil {
		return MastersView{}, err
	}
	hosts := map[string]*HostConnections{}
	for i := range out.Masters {
		m := &out.Masters[i]
		if m.Connections == nil || m.Liveness == "offline" {
			continue
		}
		m.Connections.Open = openOf(sessions, m.Name)
		h := hosts[m.Host]
		if h == nil {
			h = &HostConnections{Host: m.Host}
			hosts[m.Host] = h
		}
		h.Open += m.Connections.Open
		h.Total += m.Connections.Total
	}
	for _, host := range slices.Sorted(maps.Keys(hosts)) {
		out.Hosts = append(out.Hosts, *hosts[host])
	}
	return out, nil
}

// maxAppName is how much of application_name PostgreSQL keeps.
const maxAppName = 63

// openOf counts the sessions of a master named name and of its workers,
// whose names start with "name/". A name cut at 63 bytes matches by its
// prefix, so two long names that share 63 bytes share their count.
func openOf(sessions map[string]int, name string) int {
	own, workers := "fleet master "+name, "fleet:work "+name+"/"
	n := 0
	for app, c := range sessions {
		switch {
		case app == own, len(app) == maxAppName && strings.HasPrefix(own, app):
			n += c
		case strings.HasPrefix(app, workers), len(app) == maxAppName && strings.HasPrefix(workers, app):
			n += c
		}
	}
	return n
}

// QueueWorkload is one queue's load.
type QueueWorkload struct {
	Queue    string `json:"queue"`
	Pending  int64  `json:"pending"`
	Delayed  int64  `json:"delayed"`
	Reserved int64  `json:"reserved"`
	// Limited counts the jobs waiting on a concurrency limit: parked until
	// a slot of their key is free. They are neither pending (no worker can
	// take them now) nor delayed, and count in no workload.
	Limited int64 `json:"limited"`
	// OldestWaitSecs is the age of the oldest ready job: how long it has
	// been available without a worker taking it.
	OldestWaitSecs float64 `json:"oldest_wait_secs"`
	// AvgRuntimeMs is the average runtime over the last 5 complete
	// minutes, from the per-minute metrics snapshots.
	AvgRuntimeMs float64 `json:"avg_runtime_ms"`
	// WorkloadSecs is (pending + reserved) × average runtime (1 s per job
	// when nothing ran lately): the work waiting, in seconds.
	WorkloadSecs float64 `json:"workload_secs"`
	// Processes counts live worker processes working the queue.
	Processes int64 `json:"processes"`
	// JobsPerMinute is the attempts finished in the last complete minute,
	// from its snapshot (the minute before, until that one is written).
	JobsPerMinute float64 `json:"jobs_per_minute"`
	// Paused says the queue is paused on its own (fleet:pause --queue).
	Paused bool `json:"paused"`
	// PausedSupervisors names the supervisors that work the queue on a
	// live master and are paused (by name, or all of them): the queue
	// gets no new jobs from those.
	PausedSupervisors []string `json:"paused_supervisors"`
	// Unworked says masters are live but no supervisor of any of them
	// works the queue: its jobs wait until a master whose configuration
	// lists it starts. With no live master it is false: then nothing is
	// worked, which fleet:status says.
	Unworked bool `json:"unworked"`
}

// workedBy maps each queue a supervisor of a live master works to those
// supervisors' names, sorted, from the masters' reports; nil when no
// master is live.
func (s *Service) workedBy(ctx context.Context) (map[string][]string, error) {
	v, err := s.Masters(ctx, false)
	if err != nil || len(v.Masters) == 0 {
		return nil, err
	}
	out := map[string][]string{}
	for _, m := range v.Masters {
		for _, sup := range m.ReportedSupervisors() {
			for _, q := range sup.Queues {
				if !slices.Contains(out[q], sup.Name) {
					out[q] = append(out[q], sup.Name)
				}
			}
		}
	}
	for _, names := range out {
		slices.Sort(names)
	}
	return out, nil
}

// UnworkedQueues returns which of queues no supervisor of any live master
// works, in their order: jobs dispatched to those wait until a master
// that works them starts. With no live master it returns none (nothing
// is worked then, which Status says).
func (s *Service) UnworkedQueues(ctx context.Context, queues ...string) ([]string, error) {
	worked, err := s.workedBy(ctx)
	if err != nil || worked == nil {
		return nil, err
	}
	var out []string
	for _, q := range queues {
		if len(worked[q]) == 0 && !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out, nil
}

// Workload returns every queue's load, in one query.
func (s *Service) Workload(ctx context.Context) ([]QueueWorkload, error) {
	loads, err := s.st.Workload(ctx)
	if err != nil {
		return nil, err
	}
	paused, err := s.PausedState(ctx)
	if err != nil {
		return nil, err
	}
	// Which supervisors work which queue, from the live masters' reports.
	worked, err := s.workedBy(ctx)
	if err != nil {
		return nil, err
	}
	workers := map[string][]string{} // queue -> paused supervisors working it
	for q, sups := range worked {
		for _, sup := range sups {
			if paused.All || slices.Contains(paused.Supervisors, sup) {
				workers[q] = append(workers[q], sup)
			}
		}
	}
	out := make([]QueueWorkload, len(loads))
	for i, l := range loads {
		by := workers[l.Queue]
		slices.Sort(by)
		runtime := cmp.Or(l.AvgRuntimeMs, 1000)
		out[i] = QueueWorkload{
			Queue: l.Queue, Pending: l.Pending, Delayed: l.Delayed, Reserved: l.Reserved, Limited: l.Limited,
			OldestWaitSecs: round(l.OldestWaitSecs, 3), AvgRuntimeMs: round(l.AvgRuntimeMs, 3),
			WorkloadSecs: round(float64(l.Pending+l.Reserved)*runtime/1000, 3),
			Processes:    l.Processes, JobsPerMinute: float64(l.JobsLastMinute),
			Paused: slices.Contains(paused.Queues, l.Queue), PausedSupervisors: append([]string{}, by...),
			Unworked: worked != nil && len(worked[l.Queue]) == 0,
		}
	}
	return out, nil
}

func round(x float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(x*p) / p
}

// LongWaits returns the queues whose oldest ready job has waited at least
// their [fleet.long_wait] threshold.
func (s *Service) LongWaits(ctx context.Context) ([]LongWaitDetected, error) {
	return CheckLongWaits(ctx, s.st, s.longWait)
}

// CheckLongWaits reads the oldest ready job of every queue that has a
// threshold (one index lookup each) and returns those that waited at least
// as long. The master's alerts and Service.LongWaits both use it.
func CheckLongWaits(ctx context.Context, st OldestWaits, thresholds map[string]int) ([]LongWaitDetected, error) {
	if len(thresholds) == 0 {
		return nil, nil
	}
	waits, err := st.QueueOldestWait(ctx, slices.Sorted(maps.Keys(thresholds)))
	if err != nil {
		return nil, err
	}
	return decide.LongWaits(waits, thresholds), nil
}

// LongWaits is the pure decision: queues whose oldest ready job's wait (in
// seconds; absent: no ready job) reached their threshold (0 or none: off),
// sorted by queue. It is decide.LongWaits.
func LongWaits(waits map[string]float64, thresholds map[string]int) []LongWaitDetected {
	return decide.LongWaits(waits, thresholds)
}

// FailedJobs lists failed jobs, newest first, payloads redacted.
func (s *Service) FailedJobs(ctx context.Context, f FailedFilter) ([]FailedJob, error) {
	var jobs []FailedJob
	if f.Search == "" {
		var err error
		if jobs, err = s.st.FailedJobList(ctx, f); err != nil {
			return nil, err
		}
	} else {
		skip := max(f.Offset, 0)
		err := s.eachVisibleMatch(ctx, f, func(j FailedJob) bool {
			if skip > 0 {
				skip--
				return true
			}
			jobs = append(jobs, j)
			return f.Limit <= 0 || len(jobs) < f.Limit
		})
		if err != nil {
			return nil, err
		}
	}
	for i := range jobs {
		s.redactFailed(&jobs[i])
	}
	return jobs, nil
}

// FailedCount counts the failed jobs matching f (its Limit and Offset
// aside): what RetryAll or ForgetAll would touch now.
func (s *Service) FailedCount(ctx context.Context, f FailedFilter) (int, error) {
	if f.Search == "" {
		return s.st.FailedJobCount(ctx, f)
	}
	ids, err := s.searchedIDs(ctx, f)
	return len(ids), err
}

// FailedJob returns one failed job, payload redacted, or
// ErrFailedJobNotFound.
func (s *Service) FailedJob(ctx context.Context, id int64) (FailedJob, error) {
	j, err := s.st.FailedJobGet(ctx, id)
	if err != nil {
		return FailedJob{}, err
	}
	s.redactFailed(&j)
	return j, nil
}

func (s *Service) redactFailed(j *FailedJob) {
	j.Payload = s.redactor.JSON(j.Payload)
	j.Error = s.redactor.Text(j.Error)
	j.Tags = s.redactor.Tags(j.Tags)
}

// Retry dispatches a failed job again with fresh attempts, linked to the
// original, and returns the new job's id (ErrFailedJobNotFound when gone).
func (s *Service) Retry(ctx context.Context, id int64) (int64, error) {
	newID, err := s.st.FailedJobRetry(ctx, id)
	return newID, err
}

// RetryAll retries every failed job matching f and returns how many.
func (s *Service) RetryAll(ctx context.Context, f FailedFilter) (int, error) {
	if f.Search == "" {
		return s.st.FailedJobRetryAll(ctx, f)
	}
	ids, err := s.searchedIDs(ctx, f)
	if err != nil {
		return 0, err
	}
	return s.st.FailedJobRetryMany(ctx, ids)
}

// Forget deletes a failed job (ErrFailedJobNotFound when gone).
func (s *Service) Forget(ctx context.Context, id int64) error {
	return s.st.FailedJobForget(ctx, id)
}

// ForgetAll deletes every failed job matching f and returns how many.
func (s *Service) ForgetAll(ctx context.Context, f FailedFilter) (int, error) {
	if f.Search == "" {
		return s.st.FailedJobForgetAll(ctx, f)
	}
	ids, err := s.searchedIDs(ctx, f)
	if err != nil {
		return 0, err
	}
	return s.st.FailedJobForgetMany(ctx, ids)
}

// Page selects a page of a list; Limit 0 means 50.
type Page struct {
	Queue string
	// Tag keeps only jobs carrying this tag (pending jobs only).
	Tag string
	// State keeps only jobs in this state, one of QueuedStates (pending
	// jobs only).
	State  string
	Limit  int
	Offset int
}

// QueuedStates are the states a pending job is in: pending (ready),
// delayed (available later), limited (held by a rate limit) and reserved
// (running).
var QueuedStates = slices.Clone(store.QueuedStates)

func (p Page) params() store.JobListParams {
	return store.JobListParams{Queue: p.Queue, Tag: p.Tag, State: p.State, Limit: cmp.Or(p.Limit, 50), Offset: max(p.Offset, 0)}
}

// PendingJobs lists jobs not finished yet (pending, delayed, limited or
// reserved), payloads and tags redacted. Jobs of one queue come in the
// order they run: the reserved ones first, then the others as a claim
// takes them, lowest priority first, then the oldest; jobs of every queue
// come by id.
func (s *Service) PendingJobs(ctx context.Context, p Page) ([]QueuedJob, error) {
	jobs, err := s.st.JobList(ctx, p.params())
	if err != nil {
		return nil, err
	}
	for i := range jobs {
		jobs[i].Payload = s.redactor.JSON(jobs[i].Payload)
		jobs[i].Tags = s.redactor.Tags(jobs[i].Tags)
		if jobs[i].LastError != nil {
			e := s.redactor.Text(*jobs[i].LastError)
			jobs[i].LastError = &e
		}
	}
	return jobs, nil
}

// CompletedJobs lists completed attempts from the job history, newest
// first.
func (s *Service) CompletedJobs(ctx context.Context, p Page) ([]FinishedJob, error) {
	jobs, err := s.st.JobHistoryList(ctx, "completed", p.params())
	if err != nil {
		return nil, err
	}
	for i := range jobs {
		if jobs[i].Error != nil { // completed attempts carry none; redact any all the same
			e := s.redactor.Text(*jobs[i].Error)
			jobs[i].Error = &e
		}
	}
	return jobs, nil
}

// JobHistory lists every recorded attempt of one job, newest first.
func (s *Service) JobHistory(ctx context.Context, jobID int64) ([]FinishedJob, error) {
	jobs, err := s.st.JobHistoryGet(ctx, jobID)
	if err != nil {
		return nil, err
	}
	for i := range jobs {
		if jobs[i].Error != nil {
			e := s.redactor.Text(*jobs[i].Error)
			jobs[i].Error = &e
		}
	}
	return jobs, nil
}

// Period is the span Metrics covers.
type Period string

// Periods.
const (
	PeriodHour Period = "hour"
	PeriodDay  Period = "day"
	PeriodWeek Period = "week"
)

// ParsePeriod reads "hour", "day" or "week".
func ParsePeriod(s string) (Period, error) {
	switch p := Period(s); p {
	case PeriodHour, PeriodDay, PeriodWeek:
		return p, nil
	}
	return "", fmt.Errorf("period must be hour, day or week, got %q", s)
}

// span is how far back a period reaches and the bucket its points cover:
// an hour by the minute, a day by 15 minutes, a week by the hour (about 60,
// 96 and 168 points per series).
func (p Period) span() (time.Duration, time.Duration) {
	switch p {
	case PeriodDay:
		return 24 * time.Hour, 15 * time.Minute
	case PeriodWeek:
		return 7 * 24 * time.Hour, time.Hour
	default:
		return time.Hour, time.Minute
	}
}

// Metrics returns the snapshots of the last hour (per minute), day (per 15
// minutes) or week (per hour), per queue and per job name.
func (s *Service) Metrics(ctx context.Context, period Period) ([]MetricsRow, error) {
	if _, err := ParsePeriod(string(period)); err != nil {
		return nil, err
	}
	back, bucket := period.span()
	rows, err := s.st.MetricsList(ctx, s.now().Add(-back), bucket)
	if err != nil {
		return nil, err
	}
	return rows, nil
}
