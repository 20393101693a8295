package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrNoListen is Listen's error on a Store made WithoutListen.
var ErrNoListen = errors.New("no connection to listen on: notifications are off, wake-ups are polled")

// Listen opens a connection of its own (not one of the pool's, so that
// several workers sharing a pool never starve it), with the pool's
// settings or those given to WithListen, listens on NotifyChannel and
// calls onNotify with the queue of every dispatch until ctx ends or the
// connection fails. onListening runs once the LISTEN is in place. On a
// Store made WithoutListen it returns ErrNoListen at once.
func (s *Store) Listen(ctx context.Context, onListening func(), onNotify func(queue string)) error {
	return s.ListenCancels(ctx, onListening, onNotify, nil)
}

// ListenCancels is Listen that, with onCancel, also listens on
// CancelChannel, on the same connection, and calls onCancel with every
// cancel request of a running job (a payload it cannot read is skipped:
// the worker's poll finds that request).
func (s *Store) ListenCancels(ctx context.Context, onListening func(), onNotify func(queue string), onCancel func(CancelNotice)) error {
	if s.noListen {
		return ErrNoListen
	}
	cfg := s.listen
	if cfg == nil {
		cfg = s.pool.Config().ConnConfig
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return fmt.Errorf("open listen connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return fmt.Errorf("listen on %s: %w", NotifyChannel, err)
	}
	if onCancel != nil {
		if _, err := conn.Exec(ctx, "LISTEN "+CancelChannel); err != nil {
			return fmt.Errorf("listen on %s: %w", CancelChannel, err)
		}
	}
	if onListening != nil {
		onListening()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		if n.Channel == CancelChannel {
			if c, err := parseCancelNotice(n.Payload); err == nil && onCancel != nil {
				onCancel(c)
			}
			continue
		}
		onNotify(n.Payload)
	}
}

// QueueNotify wakes the workers listening for queues. It runs as a
// transaction of its own with synchronous_commit off: a notification only
// wakes idle workers early (polling is the fallback), so it need not wait
// for the WAL flush while it holds PostgreSQL's notify lock.
func (s *Store) QueueNotify(ctx context.Context, queues []string) error {
	if len(queues) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `
		SELECT set_config('synchronous_commit', 'off', true), pg_notify('`+NotifyChannel+`', q)
		FROM unnest($1::text[]) AS q`, queues)
	if err != nil {
		return fmt.Errorf("notify queues %v: %w", queues, err)
	}
	return nil
}

// queueNotifySQL notifies the queues in $1, at the commit of the
// transaction it runs in.
const queueNotifySQL = `SELECT pg_notify('` + NotifyChannel + `', q) FROM unnest($1::text[]) AS q`

// QueueNotifyTx queues on tx a notification for queues, delivered when tx
// commits.
func QueueNotifyTx(ctx context.Context, tx DBTX, queues []string) error {
	if len(queues) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, queueNotifySQL, queues); err != nil {
		return fmt.Errorf("notify queues %v: %w", queues, err)
	}
	return nil
}
