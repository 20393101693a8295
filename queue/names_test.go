package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

func TestCheckNames(t *testing.T) {
	t.Parallel()
	cases := []struct {
		queue, want string
	}{
		{"mail", ""},
		{"mail high", ""},
		{"ünïcode-q", ""},
		{strings.Repeat("q", queue.MaxQueueBytes), ""},
		{"", "--queue must not be empty"},
		{"  ", "--queue must not be empty"},
		{"a\nb", `--queue "a\nb" must not contain control characters (U+000A at byte 1)`},
		{"a\tb", "control characters (U+0009"},
		{"a\x00b", "control characters (U+0000"},
		{"\x7f", "control characters (U+007F"},
		{"bad\xffutf8", "--queue must be valid UTF-8"},
		{strings.Repeat("q", queue.MaxQueueBytes+1), "--queue must be at most 200 bytes, got 201"},
	}
	for _, c := range cases {
		err := queue.CheckQueue("--queue", c.queue)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckQueue(%q) = %v, want %q", c.queue, err, c.want)
		}
	}
	if err := queue.CheckName("--name", strings.Repeat("n", queue.MaxNameBytes)); err != nil {
		t.Errorf("longest name: %v", err)
	}
	if err := queue.CheckName("--name", strings.Repeat("n", queue.MaxNameBytes+1)); err == nil || err.Error() != "--name must be at most 500 bytes, got 501" {
		t.Errorf("too long a name: %v", err)
	}
}

func TestDispatchRejectsBadNamesOnEveryPath(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	c := queue.NewClient(pool, queue.Defaults{})
	bad := []struct {
		job  *queue.JobSpec
		want string
	}{
		{queue.NewJob("", nil), "JobSpec.Name must not be empty"},
		{queue.NewJob(" ", nil), "JobSpec.Name must not be empty"},
		{queue.NewJob("mail\nsend", nil), "JobSpec.Name"},
		{queue.NewJob("x", nil).OnQueue("a\tb"), "JobSpec.Queue"},
		{queue.NewJob("x", nil).OnQueue(strings.Repeat("q", 201)), "JobSpec.Queue must be at most 200 bytes"},
	}
	for _, b := range bad {
		if _, err := c.Dispatch(ctx, b.job); !errors.Is(err, queue.ErrInvalidJob) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Dispatch: %v, want %q", err, b.want)
		}
		if _, err := c.DispatchMany(ctx, []*queue.JobSpec{queue.NewJob("ok", nil), b.job}); !errors.Is(err, queue.ErrInvalidJob) {
			t.Errorf("DispatchMany: %v", err)
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := c.DispatchTx(ctx, tx, b.job); return err })
		if !errors.Is(err, queue.ErrInvalidJob) {
			t.Errorf("DispatchTx: %v", err)
		}
	}
	if _, err := queue.NewClient(pool, queue.Defaults{Queue: "x\ny"}).Dispatch(ctx, queue.NewJob("x", nil)); err == nil || !strings.Contains(err.Error(), "Defaults.Queue") {
		t.Errorf("bad default queue: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d jobs inserted (%v)", n, err)
	}
}

func TestDispatchRefusesLargePayloadsOnEveryPath(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	small := queue.NewClient(pool, queue.Defaults{MaxPayloadBytes: 16})
	big := map[string]string{"to": "someone@example.com"}
	if _, err := small.Dispatch(ctx, queue.NewJob("x", big)); !errors.Is(err, queue.ErrInvalidJob) || !strings.Contains(err.Error(), "payload is 28 bytes, more than the 16 allowed") {
		t.Fatalf("Dispatch: %v", err)
	}
	if _, err := small.DispatchMany(ctx, []*queue.JobSpec{queue.NewJob("x", nil), queue.NewJob("x", big)}); !errors.Is(err, queue.ErrInvalidJob) {
		t.Fatalf("DispatchMany: %v", err)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := small.DispatchTx(ctx, tx, queue.NewJob("x", big)); return err })
	if !errors.Is(err, queue.ErrInvalidJob) {
		t.Fatalf("DispatchTx: %v", err)
	}
	// The default: 1 MiB.
	def := queue.NewClient(pool, queue.Defaults{})
	huge := []byte(`"` + strings.Repeat("x", queue.DefaultMaxPayloadBytes-1) + `"`)
	if _, err := def.Dispatch(ctx, queue.NewJob("x", huge)); !errors.Is(err, queue.ErrInvalidJob) {
		t.Fatalf("1 MiB + 1: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_jobs`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d jobs inserted (%v)", n, err)
	}
	if _, err := def.Dispatch(ctx, queue.NewJob("x", []byte(`"`+strings.Repeat("x", queue.DefaultMaxPayloadBytes-2)+`"`))); err != nil {
		t.Fatalf("exactly 1 MiB: %v", err)
	}
}
