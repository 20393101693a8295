package master

import (
	"context"
	"time"

	"github.com/fleet-go/fleet/fleet"
)

// Duties are done by one master of the fleet at a time: each is claimed
// through a conditional update of a fleet_state row, so two masters never
// both do it in the same period.
const (
	// snapshotEvery is how often a master tries the metrics snapshot; the
	// claim lasts a bit less than a minute so that exactly one master per
	// minute wins.
	snapshotClaim = 50 * time.Second
	// partitionsEvery is how often one master creates partitions ahead and
	// trims old ones.
	partitionsEvery = 10 * time.Minute
	// partitionsHoursAhead and partitionsDaysAhead say how far ahead
	// partitions are created.
	partitionsHoursAhead = 48
	partitionsDaysAhead  = 8
)

// duties runs the once-per-period work of the fleet that falls to this
// master: metrics snapshots, partition upkeep, long-wait alerts.
func (m *Master) duties(ctx context.Context) {
	now := m.set.Now()
	if minute := now.Truncate(time.Minute); !minute.Equal(m.lastSnapshot) {
		m.lastSnapshot = minute
		if won, err := m.st.DutyClaim(ctx, "metrics", snapshotClaim); err != nil {
			m.log.Warn("claim the metrics snapshot failed", "err", err)
		} else if won {
			if n, err := m.st.MetricsSnapshot(ctx); err != nil {
				m.log.Warn("metrics snapshot failed", "err", err)
			} else {
				m.log.Debug("metrics snapshot written", "rows", n)
			}
		}
	}
	if now.Sub(m.lastPartitions) >= partitionsEvery {
		m.lastPartitions = now
		m.partitions(ctx)
	}
	m.longWaits(ctx)
}

// partitions creates history partitions ahead and drops expired ones, if
// no other master did in the last period.
func (m *Master) partitions(ctx context.Context) {
	won, err := m.st.DutyClaim(ctx, "partitions", partitionsEvery-time.Minute)
	if err != nil {
		m.log.Warn("claim partition upkeep failed", "err", err)
		return
	}
	if !won {
		return
	}
	created, err := m.st.PartitionsEnsure(ctx, partitionsHoursAhead, partitionsDaysAhead)
	if err != nil {
		m.log.Warn("create history partitions failed", "err", err)
	}
	dropped, err := m.st.PartitionsTrim(ctx, m.set.Trim)
	if err != nil {
		m.log.Warn("trim history partitions failed", "err", err)
	}
	failed, err := m.st.FailedJobTrim(ctx, time.Duration(m.set.Trim.FailedDays)*24*time.Hour)
	if err != nil {
		m.log.Warn("trim failed jobs failed", "err", err)
	}
	if created+dropped > 0 || failed > 0 {
		m.log.Info("history upkeep", "partitions_created", created, "partitions_dropped", dropped, "failed_jobs_trimmed", failed)
	}
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
