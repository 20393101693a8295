package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

func TestLimitKeyBoundsAgree(t *testing.T) {
	t.Parallel()
	if config.MaxLimitPatternBytes != queue.MaxLimitKeyBytes-len(queue.NameLimitKeyPrefix) {
		t.Fatalf("config.MaxLimitPatternBytes = %d, want queue.MaxLimitKeyBytes - len(prefix) = %d",
			config.MaxLimitPatternBytes, queue.MaxLimitKeyBytes-len(queue.NameLimitKeyPrefix))
	}
}

func TestDispatchRefusesBadLimits(t *testing.T) {
	t.Parallel()
	c := queue.NewClient(pgtest.Pool(t), queue.Defaults{Limits: map[string]int{"zero.*": 0}})
	for _, tt := range []struct {
		job  *queue.JobSpec
		want string
	}{
		{queue.NewJob("a", nil).Limit("", 2), "JobSpec.Limit key must not be empty"},
		{queue.NewJob("a", nil).Limit("k", 0), `JobSpec.Limit of key "k" must be at least 1, got 0`},
		{queue.NewJob("a", nil).Limit(strings.Repeat("k", queue.MaxLimitKeyBytes+1), 1), "JobSpec.Limit key must be at most 200 bytes, got 201"},
		{queue.NewJob("a", nil).Limit("a\nb", 1), "JobSpec.Limit key \"a\\nb\" must not contain control characters"},
		{queue.NewJob("zero.x", nil), `Defaults.Limits of key "name:zero.*" must be at least 1, got 0`},
	} {
		_, err := c.Dispatch(t.Context(), tt.job)
		if !errors.Is(err, queue.ErrInvalidJob) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("got %v, want ErrInvalidJob containing %q", err, tt.want)
		}
	}
	if err := queue.CheckNameLimits("queue.limits", map[string]int{"a[": 1}); err == nil || !strings.Contains(err.Error(), `queue.limits["a["]`) {
		t.Errorf("bad pattern: %v", err)
	}
}

func TestDispatchAppliesNameLimits(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{Limits: map[string]int{"exports.*": 2, "exports.csv": 1, "*": 50}})
	ctx := t.Context()
	for _, tt := range []struct {
		job       *queue.JobSpec
		key       string
		limit     int
		unlimited bool
	}{
		{job: queue.NewJob("exports.pdf", nil), key: "name:exports.*", limit: 2},
		{job: queue.NewJob("exports.csv", nil), key: "name:exports.csv", limit: 1},
		{job: queue.NewJob("mail", nil), key: "name:*", limit: 50},
		{job: queue.NewJob("exports.pdf", nil).Limit("tenant:7", 3), key: "tenant:7", limit: 3},
		{job: queue.NewJob("a/b", nil), unlimited: true}, // * does not match /
	} {
		idRes, err := c.Dispatch(ctx, tt.job)
		if err != nil {
			t.Fatal(err)
		}
		id := idRes.ID
		var key *string
		var limit *int
		if err := pool.QueryRow(ctx, `SELECT limit_key, limit_n FROM queue_jobs WHERE id = $1`, id).Scan(&key, &limit); err != nil {
			t.Fatal(err)
		}
		if tt.unlimited {
			if key != nil {
				t.Errorf("%s: limit key %q, want none", tt.job.Name, *key)
			}
			continue
		}
		if key == nil || *key != tt.key || *limit != tt.limit {
			t.Errorf("%s: limit %v/%v, want %s/%d", tt.job.Name, key, limit, tt.key, tt.limit)
		}
	}
}

// TestLimitHoldsOverEveryDispatchPath dispatches jobs of one key at 3
// from 16 goroutines through Dispatch (shared inserts), DispatchManyTx and
// DispatchManySQLTx at once: never more than 3 of them are ready.
func TestLimitHoldsOverEveryDispatchPath(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	job := func() *queue.JobSpec { return queue.NewJob("x", nil).Limit("shared", 3) }
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for range 5 {
				var err error
				switch g % 3 {
				case 0:
					_, err = c.Dispatch(ctx, job())
				case 1:
					err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						_, err := c.DispatchManyTx(ctx, tx, []*queue.JobSpec{job(), job()})
						return err
					})
				case 2:
					var tx *sql.Tx
					if tx, err = db.BeginTx(ctx, nil); err == nil {
						if _, err = c.DispatchManySQLTx(ctx, tx, []*queue.JobSpec{job(), queue.NewJob("free", nil)}); err == nil {
							err = tx.Commit()
						} else {
							_ = tx.Rollback()
						}
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var ready, active, total int
	if err := pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE available_at <> 'infinity'), (SELECT active FROM queue_limits WHERE key = 'shared'), count(*)
		FROM queue_jobs WHERE limit_key = 'shared'`).Scan(&ready, &active, &total); err != nil {
		t.Fatal(err)
	}
	if ready > 3 || ready != active || total != 6*5+5*5*2+5*5 {
		t.Fatalf("%d ready, active %d, %d jobs of the key; want at most 3 ready, active equal, %d jobs", ready, active, total, 6*5+5*5*2+5*5)
	}
}
