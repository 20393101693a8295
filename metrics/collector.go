// Package metrics exposes fleet's state to Prometheus. A Collector reads the
// queues, masters, processes, pause switches, counters and recent runtimes
// from PostgreSQL when scraped, in one statement, cached
// for a few seconds so that however many scrapers ask, the database answers
// once per CacheTTL. Handler serves it with the Go and process metrics.
//
// Families (all labels are snake_case):
//
//	fleet_queue_jobs{queue,state}                gauge: state is pending, delayed, reserved or limited
//	fleet_queue_oldest_wait_seconds{queue}       gauge: age of the oldest ready job, 0 with none
//	fleet_queue_paused{queue}                    gauge: 1 for each paused queue, 0 for the others
//	fleet_queue_unworked{queue}                  gauge: 1 for a queue no supervisor of a live master works, 0 for the others (absent with no live master)
//	fleet_processes{[master,]supervisor,group}   gauge: worker processes of this master (of the live masters without Options.Instance)
//	fleet_jobs_processed_total{queue}            counter: attempts (not jobs) processed, from fleet_counters
//	fleet_jobs_failed_total{queue}               counter: attempts failed, timed out or lost, from fleet_counters
//	fleet_attempts_total{queue,outcome}          counter: attempts by outcome: completed, failed, timed_out, lost, cancelled, interrupted
//	fleet_jobs_total{queue,outcome}              counter: jobs by what an attempt made of them: completed, failed (for good), retried, cancelled, lost (released after its worker died), interrupted (released after its worker stopped it)
//	fleet_job_runtime_seconds{queue,name}        histogram: attempts' runtimes, from fleet_runtime_counters (name: a queue's 20 busiest, else "other")
//	fleet_masters{state}                         gauge: masters by liveness on the database clock: online, draining, offline (expired, not yet deleted); all three always
//	fleet_supervisor_paused{supervisor}          gauge: 1 for each paused supervisor, 0 for the others
//	fleet_paused_all                             gauge: 1 when every supervisor is paused, else 0
//	fleet_master_beat_errors_total               counter: the master's failed beats (with Options.Beat)
//	fleet_master_beat_duration_seconds           histogram: the master's beats (with Options.Beat)
//	fleet_master_view_age_seconds                gauge: time since the master's last successful beat (with Options.Beat)
//	fleet_master_duplicate_names_total           counter: other live instances seen under the master's name (with Options.Beat)
//	fleet_cleanup_held_seconds                   gauge: how long the oldest transaction of the database has held back the cleanup of dead rows, 0 with none
//	fleet_cleanup_holder_seconds{pid,application_name} gauge: each session that has held it back past Options.HeldAfter (at most 5, the oldest)
//	fleet_scrape_errors_total                    counter: failed reads of the database
//
// When a read fails, a scrape holds only fleet_scrape_errors_total and the
// beat metrics, which come from the process rather than the database.
//
// Several masters: a master's collector (Options.Instance set) exports the
// fleet-wide families (queues, counters, runtimes, masters, pause
// switches) only while its master holds the exporter lease, a fleet_state
// row that the scrape statement itself takes or renews, so that at any
// moment of the database clock one master carries them; fleet_processes
// shows only the master's own children. Summing any family over every
// master's scrape then gives the fleet's value. Per-master families
// (fleet_processes, the beat families and fleet_metrics_exporter) carry
// master=<name>.
//
//	fleet_metrics_exporter{master}               gauge: 1 on the master exporting the fleet-wide families, else 0
//	fleet_build_info{version,go_version}         gauge: 1, per master
//	fleet_queue_long_wait_threshold_seconds{queue} gauge: the positive thresholds of Options.LongWait
//
// fleet_queue_paused shows every queue of the read at 0 or 1, and
// fleet_supervisor_paused every supervisor of a live master's report, so
// the series exist before anything is paused.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fleet-go/fleet/store"
)

// DefaultCacheTTL is how long a read serves scrapes when Options.CacheTTL is
// not set.
const DefaultCacheTTL = 5 * time.Second

// readTimeout bounds one read of the database; Collect has no context of its
// own.
const readTimeout = 10 * time.Second

// masterStates are the states fleet_masters always shows, 0 when no master
// is in them.
func masterStates() [3]string { return [...]string{"online", "draining", "offline"} }

// Options configure a Collector.
type Options struct {
	// CacheTTL is how long one read of the database serves scrapes; zero or
	// less means DefaultCacheTTL.
	CacheTTL time.Duration
	// Now tells the time for the cache; nil means time.Now. For tests.
	Now func() time.Time
	// Logger receives read failures, once per streak; nil means
	// slog.Default().
	Logger *slog.Logger
	// Beat, when set, adds the master's own beat stats.
	Beat BeatStats
	// Master and Instance, when Instance is set, make the collector one
	// master's of several: it exports the fleet-wide families only while
	// its master holds the exporter lease (see store.ScrapeReadAs), and
	// fleet_processes only for its own master's workers; every per-master
	// family carries the label master=Master. Without Instance the
	// collector exports the whole fleet's values, as for a single reader.
	Master   string
	Instance string
	// ExportLease is how long the exporter lease lasts without a scrape of
	// its holder; zero or less means DefaultExportLease. It is raised to
	// twice CacheTTL when shorter, so that a holder's cached read never
	// outlives its lease.
	ExportLease time.Duration
	// Version is the app's version shown by fleet_build_info; empty means
	// the main module's version from the build, else "unknown".
	Version string
	// LongWait maps a queue to its long-wait threshold in seconds (as
	// fleet.long_wait); each positive one is exported by
	// fleet_queue_long_wait_threshold_seconds.
	LongWait map[string]int
	// HeldAfter is how long a session must hold back the cleanup of dead
	// rows to be shown by fleet_cleanup_holder_seconds (as
	// fleet.held_warn_secs); zero shows none.
	HeldAfter time.Duration
}

// DefaultExportLease is the exporter lease when Options.ExportLease is not
// set: longer than any usual scrape interval, so that the masters being
// scraped do not trade the role back and forth.
const DefaultExportLease = 2 * time.Minute

// BeatStats is implemented by the master's membership service.
type BeatStats interface {
	// BeatErrors is how many beats have failed since the master started.
	BeatErrors() uint64
	// BeatDurations is the beat-duration histogram: cumulative counts per
	// upper bound in seconds, the count and the sum.
	BeatDurations() (buckets map[float64]uint64, count uint64, sum float64)
	// ViewAge is the time since the last successful beat.
	ViewAge() time.Duration
	// Duplicates counts other live instances seen under the same name.
	Duplicates() uint64
}

// Collector is a prometheus.Collector reading fleet state from PostgreSQL at
// scrape time through one cached query per CacheTTL: concurrent or repeated
// scrapes within CacheTTL share one ScrapeRead. It is safe for concurrent
// use.
type Collector struct {
	read    func(context.Context) (store.Scrape, error)
	release func(context.Context) error
	ownOnly bool   // one master's of several: fleet_processes from its own row
	master  string // the master's name, with ownOnly
	version string
	// longWait holds the positive thresholds, by queue.
	thresholds map[string]int
	ttl        time.Duration
	now        func() time.Time
	log        *slog.Logger
	beat       BeatStats

	queueJobs    *prometheus.Desc
	queueOldest  *prometheus.Desc
	queuePaused  *prometheus.Desc
	queueUnwork  *prometheus.Desc
	processes    *prometheus.Desc
	exporter     *prometheus.Desc
	buildInfo    *prometheus.Desc
	longWait     *prometheus.Desc
	processed    *prometheus.Desc
	failed       *prometheus.Desc
	attempts     *prometheus.Desc
	jobs         *prometheus.Desc
	runtime      *prometheus.Desc
	masters      *prometheus.Desc
	supPaused    *prometheus.Desc
	pausedAll    *prometheus.Desc
	beatErrors   *prometheus.Desc
	beatDuration *prometheus.Desc
	viewAge      *prometheus.Desc
	duplicates   *prometheus.Desc
	scrapeErrors *prometheus.Desc
	heldOldest   *prometheus.Desc
	holders      *prometheus.Desc

	// mu guards the cache and is held across a read, so that scrapes
	// arriving meanwhile wait for it and share its result.
	mu      sync.Mutex
	readAt  time.Time // when the cached read finished; zero before the first
	last    store.Scrape
	lastErr error
	errors  uint64 // failed reads
	failing bool   // the last read failed: the streak is logged already
	// released is set by Release: the collector no longer reads.
	released bool
}

// NewCollector returns a Collector reading from pool. Its one statement
// turns PostgreSQL's JIT off for its own transaction (it expands every
// master's report, which can estimate past jit_above_cost), so pool needs
// no setting of its own for it, behind a transaction pooler too: there,
// open pool with pgx's exec mode (default_query_exec_mode=exec), as
// every pool behind one.
func NewCollector(pool *pgxpool.Pool, opts Options) *Collector {
	st := store.New(pool)
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	var per prometheus.Labels // the labels of a per-master family
	processLabels := []string{"supervisor", "group"}
	processHelp := "Worker processes of a supervisor's group (a queue, or queues joined by commas), summed over the live masters."
	as := store.ScrapeAs{HeldAfter: opts.HeldAfter}
	read := func(ctx context.Context) (store.Scrape, error) { return st.ScrapeReadWith(ctx, as) }
	release := func(context.Context) error { return nil }
	if opts.Instance != "" {
		lease := opts.ExportLease
		if lease <= 0 {
			lease = DefaultExportLease
		}
		as.Instance, as.Lease = opts.Instance, max(lease, 2*opts.CacheTTL)
		release = func(ctx context.Context) error { return st.ScrapeRelease(ctx, opts.Instance) }
		per = prometheus.Labels{"master": opts.Master}
		processLabels = []string{"master", "supervisor", "group"}
		processHelp = "Worker processes this master runs for a supervisor's group (a queue, or queues joined by commas); sum over the masters for the fleet."
	}
	c := &Collector{
		read:       read,
		release:    release,
		ownOnly:    opts.Instance != "",
		ttl:        opts.CacheTTL,
		now:        opts.Now,
		log:        opts.Logger,
		beat:       opts.Beat,
		master:     opts.Master,
		version:    buildVersion(opts.Version),
		thresholds: positive(opts.LongWait),

		buildInfo: prometheus.NewDesc("fleet_build_info",
			"1, labelled with the app's version and the Go version it was built with.",
			[]string{"version", "go_version"}, per),
		longWait: prometheus.NewDesc("fleet_queue_long_wait_threshold_seconds",
			"The queue's long-wait threshold (fleet.long_wait): an alert is raised when fleet_queue_oldest_wait_seconds reaches it.",
			[]string{"queue"}, nil),

		exporter: prometheus.NewDesc("fleet_metrics_exporter",
			"1 when this master exports the fleet-wide families (it holds the exporter lease), else 0; sums to 1 over the masters.",
			nil, per),

		queueJobs: prometheus.NewDesc("fleet_queue_jobs",
			"Jobs in the queue by state: pending (ready now), delayed (available later), reserved (held by a worker) or limited (waiting for a slot of their concurrency limit).",
			[]string{"queue", "state"}, nil),
		queueOldest: prometheus.NewDesc("fleet_queue_oldest_wait_seconds",
			"How long the oldest ready job of the queue has waited since it became available, 0 with none.",
			[]string{"queue"}, nil),
		queuePaused: prometheus.NewDesc("fleet_queue_paused",
			"1 for each queue paused in every supervisor, 0 for the other queues.",
			[]string{"queue"}, nil),
		queueUnwork: prometheus.NewDesc("fleet_queue_unworked",
			"1 for a queue that masters are live but no supervisor of theirs works (its jobs wait for a master that works it), 0 for the other queues; absent while no master is live.",
			[]string{"queue"}, nil),
		processes: prometheus.NewDesc("fleet_processes", processHelp, processLabels, nil),
		processed: prometheus.NewDesc("fleet_jobs_processed_total",
			"Attempts (not jobs) of the queue processed: every attempt but snoozed ones. See fleet_attempts_total and fleet_jobs_total.",
			[]string{"queue"}, nil),
		failed: prometheus.NewDesc("fleet_jobs_failed_total",
			"Attempts (not jobs) of the queue that failed, timed out or were lost.",
			[]string{"queue"}, nil),
		attempts: prometheus.NewDesc("fleet_attempts_total",
			"Attempts of the queue by outcome: completed, failed, timed_out, lost (its worker died), cancelled, or interrupted (its worker stopped it as it exited).",
			[]string{"queue", "outcome"}, nil),
		jobs: prometheus.NewDesc("fleet_jobs_total",
			"Jobs of the queue by what their attempt made of them: completed, failed (for good: moved to failed jobs), retried (to run again after a failed or timed out attempt), cancelled, lost (to run again after its worker died), or interrupted (to run again after its worker stopped it as it exited, no try spent).",
			[]string{"queue", "outcome"}, nil),
		runtime: prometheus.NewDesc("fleet_job_runtime_seconds",
			"Runtime of the attempts a worker timed, by queue and job name (a queue's 20 busiest names; the others as \"other\").",
			[]string{"queue", "name"}, nil),
		masters: prometheus.NewDesc("fleet_masters",
			"Masters by liveness on the database clock: online, draining, or offline (expired, not yet deleted).",
			[]string{"state"}, nil),
		supPaused: prometheus.NewDesc("fleet_supervisor_paused",
			"1 for each supervisor paused by name, 0 for the others.",
			[]string{"supervisor"}, nil),
		pausedAll: prometheus.NewDesc("fleet_paused_all",
			"1 when every supervisor is paused, else 0.",
			nil, nil),
		beatErrors: prometheus.NewDesc("fleet_master_beat_errors_total",
			"Beats of this master that failed.",
			nil, per),
		beatDuration: prometheus.NewDesc("fleet_master_beat_duration_seconds",
			"How long the beats of this master took.",
			nil, per),
		viewAge: prometheus.NewDesc("fleet_master_view_age_seconds",
			"Seconds since this master's last successful beat: the age of its view of the fleet.",
			nil, per),
		duplicates: prometheus.NewDesc("fleet_master_duplicate_names_total",
			"Other live master instances seen under this master's name.",
			nil, per),
		heldOldest: prometheus.NewDesc("fleet_cleanup_held_seconds",
			"How long the oldest transaction of the database has held back the cleanup of dead rows (0: none): while one is held open, fleet's tables and indexes keep every row version its jobs leave behind.",
			nil, nil),
		holders: prometheus.NewDesc("fleet_cleanup_holder_seconds",
			"How long each session that has held back the cleanup of dead rows for longer than fleet.held_warn_secs has held it (at most 5, the oldest); see fleet:status and the master's log for its statement.",
			[]string{"pid", "application_name"}, nil),
		scrapeErrors: prometheus.NewDesc("fleet_scrape_errors_total",
			"Reads of fleet state from the database that failed.",
			nil, nil),
	}
	if c.ttl <= 0 {
		c.ttl = DefaultCacheTTL
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c
}

// Describe sends the descriptors of every family the collector emits.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.queueJobs, c.queueOldest, c.queuePaused, c.queueUnwork, c.processes, c.processed, c.failed, c.attempts, c.jobs,
		c.runtime, c.masters, c.supPaused, c.pausedAll, c.heldOldest, c.holders, c.scrapeErrors,
	} {
		ch <- d
	}
	ch <- c.buildInfo
	ch <- c.longWait
	if c.ownOnly {
		ch <- c.exporter
	}
	if c.beat != nil {
		ch <- c.beatErrors
		ch <- c.beatDuration
		ch <- c.viewAge
		ch <- c.duplicates
	}
}

// Collect reads fleet state, or takes the read of the last CacheTTL, and
// sends its metrics. After a failed read it sends only
// fleet_scrape_errors_total and the beat metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	sc, errs, err := c.scrape()
	ch <- prometheus.MustNewConstMetric(c.scrapeErrors, prometheus.CounterValue, float64(errs))
	ch <- prometheus.MustNewConstMetric(c.buildInfo, prometheus.GaugeValue, 1, c.version, runtime.Version())
	if c.beat != nil {
		ch <- prometheus.MustNewConstMetric(c.beatErrors, prometheus.CounterValue, float64(c.beat.BeatErrors()))
		buckets, n, sum := c.beat.BeatDurations()
		ch <- prometheus.MustNewConstHistogram(c.beatDuration, n, sum, buckets)
		ch <- prometheus.MustNewConstMetric(c.viewAge, prometheus.GaugeValue, c.beat.ViewAge().Seconds())
		ch <- prometheus.MustNewConstMetric(c.duplicates, prometheus.CounterValue, float64(c.beat.Duplicates()))
	}
	if err != nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, q := range sc.Queues {
		gauge(c.queueJobs, float64(q.Pending), q.Queue, "pending")
		gauge(c.queueJobs, float64(q.Delayed), q.Queue, "delayed")
		gauge(c.queueJobs, float64(q.Reserved), q.Queue, "reserved")
		gauge(c.queueJobs, float64(q.Limited), q.Queue, "limited")
		gauge(c.queueOldest, q.OldestWaitSecs, q.Queue)
	}
	// Every queue known to the read shows paused at 0 or 1, so that a
	// query or alert finds the series before anything is paused.
	paused := map[string]float64{}
	for _, q := range sc.Queues {
		paused[q.Queue] = 0
	}
	for _, q := range sc.PausedQueues {
		paused[q] = 1
	}
	for _, q := range slices.Sorted(maps.Keys(paused)) {
		gauge(c.queuePaused, paused[q], q)
	}
	// A queue is worked when some live master's supervisor has a group
	// for it (the groups of every supervisor are reported, with 0
	// processes too).
	if live := sc.Masters["online"] + sc.Masters["draining"]; live > 0 && len(sc.Queues) > 0 {
		worked := map[string]bool{}
		for _, p := range sc.Processes {
			for _, q := range strings.Split(p.Group, ",") {
				worked[q] = true
			}
		}
		for _, q := range sc.Queues {
			v := 1.0
			if worked[q.Queue] {
				v = 0
			}
			gauge(c.queueUnwork, v, q.Queue)
		}
	}
	if sc.Exporter {
		for _, q := range slices.Sorted(maps.Keys(c.thresholds)) {
			gauge(c.longWait, float64(c.thresholds[q]), q)
		}
	}
	if c.ownOnly {
		exporting := 0.0
		if sc.Exporter {
			exporting = 1
		}
		gauge(c.exporter, exporting)
		for _, p := range sc.Own {
			gauge(c.processes, float64(p.Processes), c.master, p.Supervisor, p.Group)
		}
	} else {
		for _, p := range sc.Processes {
			gauge(c.processes, float64(p.Processes), p.Supervisor, p.Group)
		}
	}
	for _, n := range sc.Counters {
		ch <- prometheus.MustNewConstMetric(c.processed, prometheus.CounterValue, float64(n.Processed), n.Queue)
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(n.Failed), n.Queue)
		for _, o := range []struct {
			outcome string
			n       int64
		}{{"completed", n.Completed}, {"failed", n.AttemptFailed}, {"timed_out", n.TimedOut}, {"lost", n.Lost}, {"cancelled", n.Cancelled}, {"interrupted", n.Interrupted}} {
			ch <- prometheus.MustNewConstMetric(c.attempts, prometheus.CounterValue, float64(o.n), n.Queue, o.outcome)
		}
		for _, o := range []struct {
			outcome string
			n       int64
		}{{"completed", n.Completed}, {"failed", n.FailedFinal}, {"retried", n.Retried}, {"cancelled", n.Cancelled}, {"lost", n.Requeued}, {"interrupted", n.Interrupted}} {
			ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.CounterValue, float64(o.n), n.Queue, o.outcome)
		}
	}
	for _, h := range runtimeHistograms(sc.Runtimes) {
		ch <- prometheus.MustNewConstHistogram(c.runtime, h.count, h.sum, h.buckets, h.queue, h.name)
	}
	states := masterStates()
	for _, state := range states {
		gauge(c.masters, float64(sc.Masters[state]), state)
	}
	for state, n := range sc.Masters { // a state this version does not know
		if !slices.Contains(states[:], state) {
			gauge(c.masters, float64(n), state)
		}
	}
	supPaused := map[string]float64{}
	for _, p := range sc.Processes {
		supPaused[p.Supervisor] = 0
	}
	for _, s := range sc.PausedSupervisors {
		supPaused[s] = 1
	}
	for _, s := range slices.Sorted(maps.Keys(supPaused)) {
		gauge(c.supPaused, supPaused[s], s)
	}
	if sc.Exporter {
		pausedAll := 0.0
		if sc.PausedAll {
			pausedAll = 1
		}
		gauge(c.pausedAll, pausedAll)
		gauge(c.heldOldest, sc.HeldOldestSecs)
		for _, h := range sc.Held {
			gauge(c.holders, h.AgeSecs, strconv.Itoa(h.PID), h.ApplicationName)
		}
	}
}

// scrape returns the cached read while it is younger than the TTL, else
// reads again, along with the count of failed reads. A failed read is
// cached like a good one, so a database that is down is asked once per TTL.
func (c *Collector) scrape() (store.Scrape, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return store.Scrape{}, c.errors, errReleased
	}
	if now := c.now(); !c.readAt.IsZero() && !now.Before(c.readAt) && now.Sub(c.readAt) < c.ttl {
		return c.last, c.errors, c.lastErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	sc, err := c.read(ctx)
	cancel()
	c.readAt, c.last, c.lastErr = c.now(), sc, err
	switch {
	case err != nil:
		c.errors++
		if !c.failing {
			c.log.Error("metrics: read fleet state", "err", err)
			c.failing = true
		}
	case c.failing:
		c.log.Info("metrics: read fleet state again")
		c.failing = false
	}
	return c.last, c.errors, c.lastErr
}

// histogram is one runtime histogram: cumulative counts by upper bound in
// seconds, the count and the sum in seconds.
type histogram struct {
	queue, name string
	buckets     map[float64]uint64
	count       uint64
	sum         float64
}

// runtimeHistograms turns the bucket rows of a read (sorted by queue, name
// and bucket) into one histogram per queue and name.
func runtimeHistograms(rows []store.ScrapeRuntime) []histogram {
	var out []histogram
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].queue != r.Queue || out[len(out)-1].name != r.Name {
			b := make(map[float64]uint64, len(store.RuntimeBoundsMs))
			for _, le := range store.RuntimeBoundsMs {
				b[le/1000] = 0
			}
			out = append(out, histogram{queue: r.Queue, name: r.Name, buckets: b})
		}
		h := &out[len(out)-1]
		h.count += uint64(r.N)
		h.sum += r.SumMs / 1000
		for i := max(r.Bucket, 0); i < len(store.RuntimeBoundsMs); i++ {
			h.buckets[store.RuntimeBoundsMs[i]/1000] += uint64(r.N)
		}
	}
	return out
}

// positive returns the entries of m above 0.
func positive(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

// buildVersion is v, else the main module's version, else "unknown".
func buildVersion(v string) string {
	if v != "" {
		return v
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "unknown"
}

// errReleased is what a scrape after Release reads: no database families.
var errReleased = errors.New("metrics: the collector is released")

// Release ends the collector's part in the exporter lease: it gives the
// lease up when its master holds it, so that another master's next scrape
// takes it at once, and from then on scrapes carry no family read from
// the database. Call it once the master's /metrics is no longer served; it
// does nothing for a collector without Options.Instance.
func (c *Collector) Release(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released = true
	return c.release(ctx)
}

// Handler returns an http.Handler serving /metrics for a fresh registry
// holding the collector plus the Go and process collectors. It answers on
// whatever path it is mounted at.
func Handler(c *Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(c.log.Handler(), slog.LevelError),
	})
}
