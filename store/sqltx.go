package store

import (
	"context"
	"database/sql"
	"fmt"
)

// JobInsertManySQL is JobInsertMany on a database/sql transaction. The
// transaction must come from the pgx stdlib driver
// (github.com/jackc/pgx/v5/stdlib), which passes Go slices to PostgreSQL
// arrays as pgx itself does.
func JobInsertManySQL(ctx context.Context, tx *sql.Tx, jobs []JobInsertParams) ([]int64, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	sql, args := jobInsertStatement(jobs)
	rows, err := tx.QueryContext(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", len(jobs), err)
	}
	defer rows.Close()
	ids := make([]int64, 0, len(jobs))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("insert %d jobs: %w", len(jobs), err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", len(jobs), err)
	}
	if len(ids) != len(jobs) {
		return nil, fmt.Errorf("insert %d jobs: got %d ids", len(jobs), len(ids))
	}
	return ids, nil
}

// QueueNotifySQLTx is QueueNotifyTx on a database/sql transaction (pgx
// stdlib driver): the notification is delivered when tx commits.
func QueueNotifySQLTx(ctx context.Context, tx *sql.Tx, queues []string) error {
	if len(queues) == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, queueNotifySQL, queues); err != nil {
		return fmt.Errorf("notify queues %v: %w", queues, err)
	}
	return nil
}
