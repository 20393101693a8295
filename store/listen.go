package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Listen opens a connection of its own (not one of the pool's, so that
// several workers sharing a pool never starve it), listens on
// NotifyChannel and calls onNotify with the queue of every dispatch until ctx
// ends or the connection fails. onListening runs once the LISTEN is in
// place.
func (s *Store) Listen(ctx context.Context, onListening func(), onNotify func(queue string)) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("open listen connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return fmt.Errorf("listen on %s: %w", NotifyChannel, err)
	}
	if onListening != nil {
		onListening()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		onNotify(n.Payload)
	}
}
