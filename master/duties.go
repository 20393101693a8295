package master

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/store"
)

// Periodic duties are done by one master of the fleet per period: each
// period of a duty (the metrics snapshot of one minute, the partition
// upkeep of one ten-minute period) is claimed in fleet_duties for that
// period, under a lease. A master that dies mid-duty leaves it undone and
// another takes it over once the lease has passed; a duty that failed is
// retried after a backoff (store.DutyRetryStep); masters catch up the
// recent periods nobody did (snapshotBack). Periods come from the database
// clock, never from this process's.
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
	// another may take it over. The upkeep itself is not cut short: moving
	// rows out of a default partition may take long, and is safe to repeat.
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
	// even when the master is stopping, so that a finished duty is not
	// redone.
	dutyRecordTimeout = 5 * time.Second
)

// periodicDuty is a duty done once per period by one master of the fleet.
type periodicDuty struct {
	name   string
	every  time.Duration
	back   int           // how many of the latest complete periods are checked
	settle time.Duration // how long after its end a period is due
	lease  time.Duration
	// timeout bounds run; 0 for none.
	timeout time.Duration
	run     func(ctx context.Context, period time.Time) error
}

// dutyMemo is what duties remembers between ticks so as not to read
// fleet_duties when nothing can be due: per duty, the instant (of this
// process's monotonic clock) before which no period can become due by
// itself. It is used only by the goroutine that runs duties.
type dutyMemo struct {
	quiet map[string]time.Time
}

// memo returns m's dutyMemo, made on first use.
func (m *Master) memo() *dutyMemo {
	if m.dutyMemo == nil {
		m.dutyMemo = &dutyMemo{quiet: map[string]time.Time{}}
	}
	return m.dutyMemo
}

// dutyHolder is the name this master claims duties under.
func (m *Master) dutyHolder() string { return m.Instance() }

// duties runs the once-per-period work of the fleet that falls to this
// master: metrics snapshots, partition upkeep, long-wait alerts.
func (m *Master) duties(ctx context.Context) {
	memo := m.memo()
	m.periodic(ctx, memo, periodicDuty{
		name: snapshotDuty, every: time.Minute, back: snapshotBack, settle: snapshotSettle,
		lease: snapshotLease, timeout: snapshotLease, run: m.snapshot,
	})
	m.periodic(ctx, memo, periodicDuty{
		name: upkeepDuty, every: partitionsEvery, back: 1, lease: upkeepLease, run: m.upkeep,
	})
	m.longWaits(ctx)
}

// periodic does the due periods of d that this master wins. It reads the
// duty's recent periods (one statement) unless it knows that none can be
// due yet: after a round in which it did every due period, until the next
// period completes or a lease held by another master ends.
func (m *Master) periodic(ctx context.Context, memo *dutyMemo, d periodicDuty) {
	if time.Now().Before(memo.quiet[d.name]) {
		return
	}
	delete(memo.quiet, d.name)
	w, err := m.st.DutyRecent(ctx, store.DutyRecentParams{Duty: d.name, Every: d.every, Back: d.back, Settle: d.settle})
	read := time.Now()
	if err != nil {
		m.log.Warn("read duty periods failed", "duty", d.name, "err", err)
		return
	}
	settled := true
	for _, period := range w.Due() {
		if !m.doPeriod(ctx, d, period) {
			settled = false
		}
	}
	if settled {
		// Measured from after the read, by this process's monotonic clock:
		// the database's clock may differ from ours, not its pace.
		memo.quiet[d.name] = read.Add(w.Wake().Sub(w.Now))
	}
}

// doPeriod claims period of d and, when won, does it and records the
// outcome. It reports whether the period is settled: done by this master,
// or no longer due (another master holds it and the next read will say
// until when).
func (m *Master) doPeriod(ctx context.Context, d periodicDuty, period time.Time) bool {
	holder := m.dutyHolder()
	won, err := m.st.DutyClaimPeriod(ctx, d.name, period, holder, d.lease)
	if err != nil {
		m.log.Warn("claim a duty failed", "duty", d.name, "period", period, "err", err)
		return false
	}
	if !won {
		return false // another master has it: read again next tick
	}
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if d.timeout > 0 {
		rctx, cancel = context.WithTimeout(ctx, d.timeout)
	}
	runErr := d.run(rctx, period)
	cancel()
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), dutyRecordTimeout)
	defer wcancel()
	if runErr != nil {
		m.log.Warn("duty failed", "duty", d.name, "period", period, "err", runErr)
		if err := m.st.DutyFailed(wctx, d.name, period, holder, runErr.Error()); err != nil {
			m.log.Warn("record a duty's failure failed", "duty", d.name, "period", period, "err", err)
		}
		return false
	}
	if err := m.st.DutyDone(wctx, d.name, period, holder); err != nil {
		// The work is done; it may be done again by whoever took the
		// period over, which every duty allows.
		m.log.Warn("record a duty done failed", "duty", d.name, "period", period, "err", err)
		return false
	}
	return true
}

// snapshot writes the metrics snapshot of minute. Its backlog is recorded
// as the minute's only when this master ran at the minute's end (and the
// store finds the write timely): a master catching up minutes from before
// it started writes their attempts, never today's backlog into them.
func (m *Master) snapshot(ctx context.Context, minute time.Time) error {
	watched := !m.startedAt.IsZero() && !m.startedAt.After(minute.Add(time.Minute))
	n, err := m.st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: minute, Watched: watched})
	if err != nil {
		return err
	}
	m.log.Debug("metrics snapshot written", "minute", minute, "rows", n, "backlog_seen", watched)
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
func (m *Master) lastSnapshot(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, lastSnapshotTimeout)
	defer cancel()
	w, err := m.st.DutyRecent(ctx, store.DutyRecentParams{Duty: snapshotDuty, Every: time.Minute, Back: snapshotBack})
	if err != nil {
		m.log.Warn("last metrics snapshot: read duty periods failed", "err", err)
		return
	}
	d := periodicDuty{name: snapshotDuty, every: time.Minute, lease: snapshotLease, timeout: snapshotLease, run: m.snapshot}
	for _, period := range w.Due() {
		m.doPeriod(ctx, d, period)
	}
	minute := w.Now.Truncate(time.Minute)
	n, err := m.st.MetricsSnapshot(ctx, store.SnapshotParams{Minute: minute, Partial: true, Watched: !m.startedAt.IsZero()})
	if err != nil {
		m.log.Warn("last metrics snapshot failed", "minute", minute, "err", err)
		return
	}
	m.log.Debug("last metrics snapshot written", "minute", minute, "rows", n)
}

// upkeep creates history partitions ahead, drops expired ones and trims
// failed jobs, old duty rows and old periodic ticks. Each step is tried even when one before
// failed; the period fails (and is retried) when any did.
func (m *Master) upkeep(ctx context.Context, _ time.Time) error {
	var errs []error
	created, err := m.st.PartitionsEnsure(ctx, partitionsHoursAhead, partitionsDaysAhead)
	errs = append(errs, err)
	dropped, err := m.st.PartitionsTrim(ctx, m.set.Trim)
	errs = append(errs, err)
	failed, err := m.st.FailedJobTrim(ctx, time.Duration(m.set.Trim.FailedDays)*24*time.Hour)
	errs = append(errs, err)
	duties, err := m.st.DutyTrim(ctx, dutyKeep)
	errs = append(errs, err)
	keys, err := m.st.UniqueKeyTrim(ctx)
	errs = append(errs, err)
	limits, err := m.st.LimitKeyTrim(ctx, limitKeysTrimmed)
	errs = append(errs, err)
	ticks, err := m.st.PeriodicTickTrim(ctx, time.Duration(m.set.Trim.CompletedHours)*time.Hour)
	errs = append(errs, err)
	if created+dropped+keys+limits > 0 || failed+duties+ticks > 0 {
		m.log.Info("history upkeep", "partitions_created", created, "partitions_dropped", dropped,
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
func (m *Master) longWaits(ctx context.Context) {
	if len(m.set.LongWait) == 0 || m.set.OnLongWait == nil {
		return
	}
	late, err := fleet.CheckLongWaits(ctx, m.st, m.set.LongWait)
	if err != nil {
		m.log.Warn("read queue waits failed", "err", err)
		return
	}
	for _, e := range late {
		won, err := m.st.DutyClaim(ctx, "longwait:"+e.Queue, m.set.LongWaitCooldown)
		if err != nil {
			m.log.Warn("claim a long-wait alert failed", "queue", e.Queue, "err", err)
			continue
		}
		if !won {
			continue
		}
		m.log.Warn("long wait detected", "queue", e.Queue, "wait_secs", e.WaitSecs, "threshold_secs", e.ThresholdSecs)
		select {
		case m.alerts <- e:
		default:
			m.log.Error("long-wait listener is too slow: alert dropped", "queue", e.Queue)
		}
	}
}

// notify hands alerts to the app's listener until alerts is closed.
func (m *Master) notify(ctx context.Context) {
	for e := range m.alerts {
		m.set.OnLongWait(ctx, e)
	}
}
