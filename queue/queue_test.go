package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		backoff []int
		attempt int
		want    time.Duration
	}{
		{nil, 1, 0},
		{[]int{5}, 1, 5 * time.Second},
		{[]int{5}, 4, 5 * time.Second},
		{[]int{1, 5, 30}, 1, time.Second},
		{[]int{1, 5, 30}, 2, 5 * time.Second},
		{[]int{1, 5, 30}, 3, 30 * time.Second},
		{[]int{1, 5, 30}, 9, 30 * time.Second},
		{[]int{1, 5, 30}, 0, 0},
	}
	for _, c := range cases {
		if got := queue.RetryDelay(c.backoff, c.attempt); got != c.want {
			t.Errorf("RetryDelay(%v, %d) = %s, want %s", c.backoff, c.attempt, got, c.want)
		}
	}
}

func TestDispatchAppliesDefaultsAndOptions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{Queue: "main", Tries: 4, Backoff: []int{2, 7}, Timeout: 9 * time.Second})
	ctx := context.Background()
	plainRes, err := c.Dispatch(ctx, queue.NewJob("a", map[string]string{"k": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	plain := plainRes.ID
	customRes, err := c.Dispatch(ctx, queue.NewJob("b", nil).OnQueue("mail").Tries(1).Backoff(3).Timeout(time.Minute).Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	custom := customRes.ID
	type row struct {
		Queue, Payload string
		Tries          int
		Backoff        []int32
		TimeoutMs      int64
		Delayed        bool
	}
	read := func(id int64) row {
		var r row
		err := pool.QueryRow(ctx, `SELECT queue, payload::text, max_tries, backoff_secs, timeout_ms, available_at > now() + interval '59 minutes'
			FROM queue_jobs WHERE id = $1`, id).Scan(&r.Queue, &r.Payload, &r.Tries, &r.Backoff, &r.TimeoutMs, &r.Delayed)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := read(plain); r.Queue != "main" || r.Payload != `{"k": "v"}` || r.Tries != 4 || len(r.Backoff) != 2 || r.TimeoutMs != 9000 || r.Delayed {
		t.Errorf("defaults: %+v", r)
	}
	if r := read(custom); r.Queue != "mail" || r.Payload != `{}` || r.Tries != 1 || len(r.Backoff) != 1 || r.Backoff[0] != 3 || r.TimeoutMs != 60000 || !r.Delayed {
		t.Errorf("options: %+v", r)
	}
}

func TestDispatchTxExistsOnlyIfCommitted(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	ctx := context.Background()
	boom := errors.New("rolled back")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := c.DispatchTx(ctx, tx, queue.NewJob("lost", nil)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := c.DispatchTx(ctx, tx, queue.NewJob("kept", nil))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	rows, _ := pool.Query(ctx, `SELECT name FROM queue_jobs`)
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) != 1 || names[0] != "kept" {
		t.Fatalf("jobs = %v, %v; want only the committed one", names, err)
	}
}

func TestDispatchManyIsAllOrNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	ctx := context.Background()
	idsRes, err := c.DispatchMany(ctx, []*queue.JobSpec{queue.NewJob("a", nil), queue.NewJob("b", nil), queue.NewJob("c", nil)})
	ids := queue.IDs(idsRes)
	if err != nil || len(ids) != 3 || !(ids[0] < ids[1] && ids[1] < ids[2]) {
		t.Fatalf("ids = %v, %v", ids, err)
	}
	_, err = c.DispatchMany(ctx, []*queue.JobSpec{queue.NewJob("ok", nil), queue.NewJob("bad", []byte(`{nope`))})
	if !errors.Is(err, queue.ErrInvalidJob) {
		t.Fatalf("err = %v, want ErrInvalidJob", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d jobs, want 3: the bad batch inserts nothing", n)
	}
}

func TestInvalidJobs(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := queue.NewClient(pool, queue.Defaults{})
	for name, j := range map[string]*queue.JobSpec{
		"no name":          queue.NewJob("", nil),
		"bad payload":      queue.NewJob("x", []byte("{")),
		"unencodable":      queue.NewJob("x", func() {}),
		"zero tries":       queue.NewJob("x", nil).Tries(-1),
		"negative backoff": queue.NewJob("x", nil).Backoff(-1),
		"negative delay":   queue.NewJob("x", nil).Delay(-time.Second),
	} {
		if _, err := c.Dispatch(context.Background(), j); !errors.Is(err, queue.ErrInvalidJob) {
			t.Errorf("%s: err = %v, want ErrInvalidJob", name, err)
		}
	}
}
