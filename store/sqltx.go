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

// JobInsertUniqueSQL is JobInsertUnique on a database/sql transaction of
// the pgx stdlib driver (see JobInsertManySQL).
func JobInsertUniqueSQL(ctx context.Context, tx *sql.Tx, jobs []JobInsertParams, uniq []UniqueParams) ([]UniqueInsert, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	rows, err := tx.QueryContext(ctx, jobInsertUniqueSQL, uniqueArgs(jobs, uniq)...)
	if err != nil {
		return nil, fmt.Errorf("insert %d unique jobs: %w", len(jobs), err)
	}
	var out []UniqueInsert
	for rows.Next() {
		var u UniqueInsert
		var id sql.NullInt64
		if err := rows.Scan(&u.Key, &id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("insert %d unique jobs: %w", len(jobs), err)
		}
		u.ID = id.Int64
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert %d unique jobs: %w", len(jobs), err)
	}
	return out, resolveDuplicates(len(jobs), out, func(keys []string) (map[string]int64, error) {
		rows, err := tx.QueryContext(ctx, uniqueHoldersSQL, keys)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		holders := map[string]int64{}
		for rows.Next() {
			var key string
			var id int64
			if err := rows.Scan(&key, &id); err != nil {
				return nil, err
			}
			holders[key] = id
		}
		return holders, rows.Err()
	})
}
