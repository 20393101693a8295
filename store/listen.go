package store

import (
	"context"
	"fmt"
)

// Listen holds one pool connection listening on NotifyChannel and calls
// onNotify with the queue of every dispatch until ctx ends or the connection
// fails. onListening runs once the LISTEN is in place. The connection is
// closed on return, never handed back to the pool with LISTEN still active.
func (s *Store) Listen(ctx context.Context, onListening func(), onNotify func(queue string)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire listen connection: %w", err)
	}
	defer func() {
		// A closed connection is destroyed by the pool instead of reused.
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return fmt.Errorf("listen on %s: %w", NotifyChannel, err)
	}
	if onListening != nil {
		onListening()
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		onNotify(n.Payload)
	}
}
