package fleet_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

func TestJobStoryNotFoundAndHandRunWorker(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	svc := fleet.New(pool, fleet.Options{})
	if _, err := svc.Job(ctx, 424242); !errors.Is(err, fleet.ErrJobNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
	if _, err := svc.FailedJobStory(ctx, 424242); !errors.Is(err, fleet.ErrFailedJobNotFound) {
		t.Fatalf("unknown failed job: %v", err)
	}
	if _, err := svc.Job(ctx, 0); err == nil {
		t.Fatal("job 0 accepted")
	}
	idRes, err := queue.NewClient(pool, queue.Defaults{}).Dispatch(ctx, queue.NewJob("x", map[string]string{"token": "hunter2"}).Tries(3))
	if err != nil {
		t.Fatal(err)
	}
	id := idRes.ID
	// Held by a worker run without a master: the member row is its own.
	if _, err := pool.Exec(ctx, `INSERT INTO fleet_masters (instance, kind, name, host, pid, expires_at)
		VALUES ('w-inst', 'worker', 'host:7:ab', 'host', 7, now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE queue_jobs SET reserved_by = 'host:7:ab', reserved_master = 'w-inst', reserved_at = now(), attempts = 1 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	s, err := svc.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != fleet.JobReserved || s.Reserved == nil || s.Reserved.MasterKind != "worker" || s.Reserved.MasterInstance != "w-inst" ||
		s.Tries != 1 || s.MaxTries == nil || *s.MaxTries != 3 || string(s.Payload) != `{"token":"[redacted]"}` || s.Reserved.Since == nil {
		t.Fatalf("story = %+v (reserved %+v)", s, s.Reserved)
	}
}
