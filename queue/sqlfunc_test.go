package queue_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
	"github.com/fleet-go/fleet/store"
)

// fleet_dispatch enqueues from plain SQL: the job a worker claims is the
// one asked for, idle workers are notified at commit, and bad arguments
// are refused by name, as the Go client refuses them.
func TestDispatchFromPlainSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.WithoutCancel(ctx))
	if _, err := listener.Exec(ctx, "LISTEN "+store.NotifyChannel); err != nil {
		t.Fatal(err)
	}

	var id int64
	err = pool.QueryRow(ctx, `SELECT fleet_dispatch('mail', 'mail.send', '{"to": "ann@example.com"}',
		priority => -3, tags => ARRAY['tenant:42', 'vip', 'tenant:42'], metadata => '{"from": "ruby"}',
		max_tries => 2, timeout => interval '30 seconds')`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(wctx)
	if err != nil || n.Payload != "mail" {
		t.Fatalf("notification: %+v, %v; want one for queue mail", n, err)
	}
	jobs, err := store.New(pool).JobClaim(ctx, store.JobClaimParams{Queue: "mail", Limit: 10, Worker: "w"})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	j := jobs[0]
	if j.ID != id || j.Name != "mail.send" || string(j.Payload) != `{"to": "ann@example.com"}` || j.Priority != -3 ||
		!slices.Equal(j.Tags, []string{"tenant:42", "vip"}) || string(j.Metadata) != `{"from": "ruby"}` ||
		j.MaxTries != 2 || j.Timeout != 30*time.Second {
		t.Errorf("claimed %+v", j)
	}

	// The defaults and a delay: no notification for a job not due yet.
	if err := pool.QueryRow(ctx, `SELECT fleet_dispatch('default', 'later', delay => interval '1 hour')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	var delayed bool
	var prio int
	if err := pool.QueryRow(ctx, `SELECT available_at > now() + interval '59 minutes', priority FROM queue_jobs WHERE id = $1`, id).Scan(&delayed, &prio); err != nil || !delayed || prio != 0 {
		t.Errorf("delayed job: delayed %v, priority %d, %v", delayed, prio, err)
	}

	many := make([]string, queue.MaxTags+1)
	for i := range many {
		many[i] = strings.Repeat("t", i+1)
	}
	for _, tc := range []struct {
		sql  string
		args []any
		want string
	}{
		{`SELECT fleet_dispatch('', 'x')`, nil, "queue must not be empty"},
		{`SELECT fleet_dispatch($1, 'x')`, []any{strings.Repeat("q", queue.MaxQueueBytes+1)}, "queue must be at most 200 bytes, got 201"},
		{`SELECT fleet_dispatch(E'a\nb', 'x')`, nil, "queue must not contain control characters"},
		{`SELECT fleet_dispatch('mail,sms', 'x')`, nil, "queue must not contain a comma (a worker's --queue is a comma-separated list), got mail,sms"},
		{`SELECT fleet_dispatch('q', '  ')`, nil, "name must not be empty"},
		{`SELECT fleet_dispatch('q', E'x\ty')`, nil, "name must not contain control characters"},
		{`SELECT fleet_dispatch('q', 'x', priority => 101)`, nil, "priority must be between -100 and 100, got 101"},
		{`SELECT fleet_dispatch('q', 'x', delay => interval '-1 second')`, nil, "delay must not be negative"},
		{`SELECT fleet_dispatch('q', 'x', tags => ARRAY['ok', ''])`, nil, "tags[2] must not be empty"},
		{`SELECT fleet_dispatch('q', 'x', tags => $1)`, []any{[]string{strings.Repeat("t", queue.MaxTagBytes+1)}}, "tags[1] must be at most 100 bytes"},
		{`SELECT fleet_dispatch('q', 'x', tags => $1)`, []any{many}, "at most 16 tags, got 17"},
		{`SELECT fleet_dispatch('q', 'x', metadata => '[1]')`, nil, "metadata must be a JSON object"},
		{`SELECT fleet_dispatch('q', 'x', max_tries => 0)`, nil, "max_tries must be at least 1, got 0"},
		{`SELECT fleet_dispatch('q', 'x', payload => $1::jsonb)`, []any{`{"a": "` + strings.Repeat("x", queue.DefaultMaxPayloadBytes) + `"}`}, "payload is"},
	} {
		_, err := pool.Exec(ctx, tc.sql, tc.args...)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, tc.want) {
			t.Errorf("%s: %v, want SQLSTATE 22023 saying %q", tc.sql, err, tc.want)
		}
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs WHERE queue = 'q'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d refused jobs inserted (%v)", left, err)
	}
}
