package fleet

import (
	"context"

	fleetqueue "github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

// Clear deletes the jobs of queue that no worker holds, pending, delayed
// (waiting for their time or a retry) and parked on a concurrency limit,
// and returns how many it deleted. Running jobs are left alone, and so are
// jobs dispatched after the clear began. A deleted job that held a slot of
// its concurrency limit gives it back; a deleted unique job frees its key
// for a new dispatch (it never ran). The delete runs in batches of
// store.QueueClearBatchDefault, each a short transaction of its own: on an
// error, the jobs of the batches before it are gone and the count says how
// many. A bad queue name is an error naming "queue".
func (s *Service) Clear(ctx context.Context, queue string) (int, error) {
	if err := fleetqueue.CheckQueue("queue", queue); err != nil {
		return 0, err
	}
	return s.st.QueueClear(ctx, store.QueueClearParams{Queue: queue})
}

// ClearCount returns how many jobs Clear(queue) would delete now, from the
// queue's kept counts (a few rows, whatever the backlog).
func (s *Service) ClearCount(ctx context.Context, queue string) (int, error) {
	if err := fleetqueue.CheckQueue("queue", queue); err != nil {
		return 0, err
	}
	n, err := s.st.QueueUnreservedCount(ctx, queue)
	return int(n), err
}
