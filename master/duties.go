package master

import (
	"context"
	"errors"
	"fmt"
	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/fleet-go/fleet/decide"
	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/store"
)

// Periodic duties are done by one master of the fleet per period: each
// period of a duty (the metrics snapshot of one minute, the partition
// upkeep of one ten-minute period) is claimed in fleet_duties for that
// period, under a lease. A master that dies mid-duty leaves it undone and
// another takes it over once the lease has passed; a duty that failed is
// retried after a backoff (store.DutyRetryStep); masters catch up the
// recent periods nobody did (snapshotBack). Periods come from the store's
// clock (the database's, unless a test gave the store one: see
// store.Store.WithClock), never from this process's.
const (
	// snapshotDuty names the metrics snapshot duty; its periods are
	// minutes.
	snapshotDuty = "metrics"
	// snapshotBack is how many of the latest complete minutes a master
	// checks for a missing snapshot.
	snapshotBack = 5
	// snapshotSettle is how long after its end a minute is snapshotted, so
	// that attempts finished in it whose history a worker writes a little
	// late are counted.
	snapshotSettle = 3 * time.Second
	// snapshotLease is how long a master holds a minute's snapshot before
	// another may take it over; it also bounds the snapshot's statement.
	snapshotLease = 30 * time.Second

	// upkeepDuty names the partition upkeep duty: history partitions ahead
	// and expired ones dropped, failed jobs and duty rows trimmed.
	upkeepDuty = "partitions"
	// partitionsEvery is the period of the upkeep.
	partitionsEvery = 10 * time.Minute
	// upkeepLease is how long a master holds an upkeep period before
	// another may take it over, and the upkeep's time limit: moving rows
	// out of a default partition may take long, and is safe to repeat, but
	// past its lease another master may be doing the same.
	upkeepLease = 3 * time.Minute
	// partitionsHoursAhead and partitionsDaysAhead say how far ahead
	// partitions are created.
	partitionsHoursAhead = 48
	partitionsDaysAhead  = 8
	// limitKeysTrimmed bounds how many unused limit keys one upkeep
	// deletes.
	limitKeysTrimmed = 10000
	// dutyKeep is how long fleet_duties rows are kept; far longer than any
	// period a master checks.
	dutyKeep = 24 * time.Hour

	// dutyRecordTimeout bounds recording a duty's outcome, which is done
	// even when the master is stopping (within its stop budget), so that a
	// finished duty is not redone.
	dutyRecordTimeout = 5 * time.Second
	// longWaitTimeout bounds the long-wait check and each of its claims.
	longWaitTimeout = statementTimeout
)

// duties is the service that does, every tick, the once-per-period work
// of the fleet that falls to this master: metrics snapshots, partition
// upkeep and trimming, long-wait alerts (handed to the alerts service).
// Its last round, on the stop budget once the children are gone, writes
// the minutes still due and the minute in progress (lastSnapshot).
type duties struct {
	st        *store.Store
	log       *slog.Logger
	holder    func() string    // the instance duties are claimed under
	startedAt func() time.Time // the master's row's, by the database clock
	now       func() time.Time // the clock of the quiet times
	budget    *stopBudget
	tick      time.Duration

	trim             store.TrimParams
	longWait         map[string]int
	longWaitCooldown time.Duration
	alert            func(model.LongWaitDetected) bool // to the alerts service; false: dropped

	// Its own state, used only by its goroutine.
	since time.Time // startedAt, read at Start
	// quiet is, per duty, the instant (of now) before which no period can
	// become due by itself: until then the duty's periods are not read.
	quiet map[string]time.Time

	lc  svclife.Lifecycle
	sig struct {
		round svclife.Signal[struct{}] // a tick's round done
		read  svclife.Signal[string]   // a duty's periods read (its name)
	}
}

// newDuties returns the duties service of a master with settings set.
func newDuties(st *store.Store, set Settings, log *slog.Logger, holder func() string, startedAt func() time.Time,
	budget *stopBudget, alert func(model.LongWaitDetected) bool) *duties {
	d := &duties{
		st: st, log: log, holder: holder, startedAt: startedAt, now: set.Now, budget: budget, tick: set.Tick,
		trim: set.Trim, longWaitCooldown: set.LongWaitCooldown, alert: alert,
		quiet: map[string]time.Time{},
	}
	if set.OnLongWait != nil {
		d.longWait = set.LongWait
	}
	return d
}

func (d *duties) Name() string { return "duties" }

// Start runs a round every tick until Stop.
func (d *duties) Start(ctx context.Context) error {
	sctx, end, err := d.lc.Begin(ctx, d.Name())
	if err != nil {
		return err
	}
	d.since = d.startedAt()
	go func() {
		defer end()
		svclife.TickEvery(sctx, d.tick, d.round, &d.sig.round)
		d.lastSnapshot(d.budget.context())
	}()
	return nil
}

// Stop cancels the round in flight, writes the last snapshots on the stop
// budget, and waits.
func (d *duties) Stop() {
	d.budget.start()
	d.lc.Halt()
}

// periodicDuty is a duty done once per period by one master of the fleet.
type periodicDuty struct {
	name   string
	every  time.Duration
	back   int           // how many of the latest complete periods are checked
	settle time.Duration // how long after its end a period is due
	lease  time.Duration
	// timeout bounds run.
	timeout time.Duration
	run     func(ctx context.Context, period time.Time) error
}

// round does the duties due: the metrics snapshots, the upkeep, the
// long-wait check.
func (d *duties) round(ctx context.Context) {
	d.periodic(ctx, periodicDuty{
		name: snapshotDuty, every: time.Minute, back: snapshotBack, settle: snapshotSettle,
		lease: snapshotLease, timeout: snapshotLease, run: d.snapshot,
	})
	d.periodic(ctx, periodicDuty{
		name: upkeepDuty, every: partitionsEvery, back: 1, lease: upkeepLease, timeout: upkeepLease, run: d.upkeep,
	})
	d.longWaits(ctx)
}

// periodic does the due periods of p that this master wins. It reads the
// duty's recent periods (one statement) unless it knows that none can be
// due yet: after a round in which it did every due period, until the next
// period completes or a lease held by another master ends.
func (d *duties) periodic(ctx context.Context, p periodicDuty) {
	if d.now().Before(d.quiet[p.name]) {
		return
	}
	delete(d.quiet, p.name)
	rctx, cancel := context.WithTimeout(ctx, statementTimeout)
	w, err := d.st.DutyRecent(rctx, store.DutyRecentParams{Duty: p.name, Every: p.every, Back: p.back, Settle: p.settle})
	cancel()
	read := d.now()
	if err != nil {
		d.log.Warn("read duty periods failed", "duty", p.name, "err", err)
		return
	}
	d.sig.read.Send(p.name)
	settled := true
	for _, period := range w.Due() {
		if !d.doPeriod(ctx, p, period) {
			settled = false
		}
	}
	if settled {
		// Measured from after the read, by this process's clock: the
		// database's clock may differ from ours, not its pace.
		d.quiet[p.name] = read.Add(w.Wake().Sub(w.Now))
	}
}

// doPeriod claims period of p and, when won, does it and records the
// outcome. It reports whether the period is settled: done by this master,
// or no longer due (another master holds it and the next read will say
// until when).
func (d *duties) doPeriod(ctx context.Context, p periodicDuty, period time.Time) bool {
	holder := d.holder()
	cctx, cancel := context.WithTimeout(ctx, statementTimeout)
	won, err := d.st.DutyClaimPeriod(cctx, p.name, period, holder, p.lease)
	cancel()
	if err != nil {
		d.log.Warn("claim a duty failed", "duty", p.name, "period", period, "err", err)
		return false
	}
	if !won {
		return false // another master has it: read again next tick
	}
	rctx, cancel := context.WithTimeout(ctx, p.timeout)
	runErr := p.run(rctx, period)
	cancel()
	// Recorded even when the service is stopping, within the stop budget.
	wctx, wcancel := d.budget.bound(ctx, dutyRecordTimeout)
	defer wcancel()
	if runErr != nil {
		d.log.Warn("duty failed", "duty", p.name, "period", period, "err", runErr)
		if err := d.st.DutyFailed(wctx, p.name, period, holder, runErr.Error()); err != nil {
			d.log.Warn("record a duty's failure failed", "duty", p.name, "period", period, "err", err)
		}
		return false
	}
	if err := d.st.DutyDone(wctx, p.name, period, holder); err != nil {
		// The work is done; it may be done again by whoever took the
		// period over, which every duty allows.
		d.log.Warn("record a duty done failed", "duty", p.name, "period", period, "err", err)
		return false
	}
	return true
}

// snapshot writes the metrics snapshot of minute. Its backlog is recorded
// as the minute's only when this master ran at the minute's end (and the
// store finds the write timely): a master catching up minutes from before
// it started writes their attempts, never today's backlog into them.
func (d *duties) snapshot(ctx context.Context, minute time.Time) error {
	watched := !d.since.IsZero() && !d.since.After(minute.Add(time.Minute))
	n, err := d.st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: minute, Watched: watched})
	if err != nil {
		return err
	}
	d.log.Debug("metrics snapshot written", "minute", minute, "rows", n, "backlog_seen", watched)
	return nil
}

// lastSnapshotTimeout bounds a stopping master's last snapshots.
const lastSnapshotTimeout = 10 * time.Second

// lastSnapshot runs once the duties loop stops, after the children have
// exited and written their outcomes: the complete minutes still due are
// done (without waiting out their settle time: no child of this master
// writes late any more), and the minute in progress is written as far as
// it went, so that a fleet stopped within a minute leaves it counted. A
// master still running writes that minute whole when it is over, replacing
// the partial rows.
func (d *duties) lastSnapshot(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, lastSnapshotTimeout)
	defer cancel()
	w, err := d.st.DutyRecent(ctx, store.DutyRecentParams{Duty: snapshotDuty, Every: time.Minute, Back: snapshotBack})
	if err != nil {
		d.log.Warn("last metrics snapshot: read duty periods failed", "err", err)
		return
	}
	p := periodicDuty{name: snapshotDuty, every: time.Minute, lease: snapshotLease, timeout: snapshotLease, run: d.snapshot}
	for _, period := range w.Due() {
		d.doPeriod(ctx, p, period)
	}
	minute := w.Now.Truncate(time.Minute)
	n, err := d.st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: minute, Partial: true, Watched: !d.since.IsZero()})
	if err != nil {
		d.log.Warn("last metrics snapshot failed", "minute", minute, "err", err)
		return
	}
	d.log.Debug("last metrics snapshot written", "minute", minute, "rows", n)
}

// upkeep creates history partitions ahead, drops expired ones and trims
// failed jobs, old duty rows and old periodic ticks. Each step is tried
// even when one before failed; the period fails (and is retried) when any
// did.
func (d *duties) upkeep(ctx context.Context, _ time.Time) error {
	var errs []error
	created, err := d.st.PartitionsEnsure(ctx, partitionsHoursAhead, partitionsDaysAhead)
	errs = append(errs, err)
	dropped, err := d.st.PartitionsTrim(ctx, d.trim)
	errs = append(errs, err)
	failed, err := d.st.FailedJobTrim(ctx, time.Duration(d.trim.FailedDays)*24*time.Hour)
	errs = append(errs, err)
	duties, err := d.st.DutyTrim(ctx, dutyKeep)
	errs = append(errs, err)
	keys, err := d.st.UniqueKeyTrim(ctx)
	errs = append(errs, err)
	limits, err := d.st.LimitKeyTrim(ctx, limitKeysTrimmed)
	errs = append(errs, err)
	ticks, err := d.st.PeriodicTickTrim(ctx, time.Duration(d.trim.CompletedHours)*time.Hour)
	errs = append(errs, err)
	if created+dropped+keys+limits > 0 || failed+duties+ticks > 0 {
		d.log.Info("history upkeep", "partitions_created", created, "partitions_dropped", dropped,
			"failed_jobs_trimmed", failed, "duties_trimmed", duties, "periodic_ticks_trimmed", ticks, "unique_keys_trimmed", keys, "limit_keys_trimmed", limits)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("history upkeep: %w", err)
	}
	return nil
}

// longWaits raises LongWaitDetected for each queue whose oldest ready job
// waited past its threshold, at most once per queue per cooldown across the
// whole fleet.
func (d *duties) longWaits(ctx context.Context) {
	if len(d.longWait) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, longWaitTimeout)
	waits, err := d.st.QueueOldestWait(lctx, slices.Sorted(maps.Keys(d.longWait)))
	cancel()
	if err != nil {
		d.log.Warn("read queue waits failed", "err", err)
		return
	}
	for _, e := range decide.LongWaits(waits, d.longWait) {
		cctx, cancel := context.WithTimeout(ctx, longWaitTimeout)
		won, err := d.st.DutyClaim(cctx, "longwait:"+e.Queue, d.longWaitCooldown)
		cancel()
		if err != nil {
			d.log.Warn("claim a long-wait alert failed", "queue", e.Queue, "err", err)
			continue
		}
		if !won {
			continue
		}
		d.log.Warn("long wait detected", "queue", e.Queue, "wait_secs", e.WaitSecs, "threshold_secs", e.ThresholdSecs)
		if !d.alert(e) {
			d.log.Error("long-wait listener is too slow: alert dropped", "queue", e.Queue)
		}
	}
}
