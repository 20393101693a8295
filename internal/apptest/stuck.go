package apptest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/queue"
)

// The handlers of the stuck-job scenario (see Jobs).
func stuckJobs(jobs *queue.Registry) {
	jobs.Handle("test.stuck", func(_ context.Context, j *queue.Job) error {
		var p struct {
			MS int `json:"ms"`
		}
		if err := j.Decode(&p); err != nil {
			return err
		}
		time.Sleep(time.Duration(p.MS) * time.Millisecond) // ignores its context
		return nil
	})
	jobs.Handle("test.beside", besideJob)
}

// besideJob is the handler of test.beside: a job that runs beside a stuck
// one. With {"after": STATUS} its first attempt waits until the history
// has a row of that status (it polls the database of APP_DATABASE__URL),
// so that it runs as its worker gives up on the stuck job; then it sleeps
// {"first_ms": N} on its first attempt, {"ms": N} on the others, and
// appends "ID ATTEMPT TRIES" to {"file": F} (see ReadAttempts). Its
// context ending stops it at any point, with the context's error.
func besideJob(ctx context.Context, j *queue.Job) error {
	var p struct {
		MS      int    `json:"ms"`
		FirstMS *int   `json:"first_ms"`
		After   string `json:"after"`
		File    string `json:"file"`
	}
	if err := j.Decode(&p); err != nil {
		return err
	}
	ms := p.MS
	if j.Attempt == 1 {
		if p.After != "" {
			if err := awaitHistory(ctx, p.After); err != nil {
				return err
			}
		}
		if p.FirstMS != nil {
			ms = *p.FirstMS
		}
	}
	select {
	case <-time.After(time.Duration(ms) * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	f, err := os.OpenFile(p.File, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d %d %d\n", j.ID, j.Attempt, j.MaxTries)
	return errors.Join(err, f.Close())
}

// awaitHistory waits until fleet_jobs has a row of status, or ctx ends.
func awaitHistory(ctx context.Context, status string) error {
	conn, err := pgx.Connect(ctx, os.Getenv("APP_DATABASE__URL"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var there bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM fleet_jobs WHERE status = $1)`, status).Scan(&there); err != nil {
			return err
		}
		if there {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Attempt is a completed run of a test.beside job: its attempt and the
// tries it had.
type Attempt struct {
	Attempt, Tries int
}

// ReadAttempts returns the completed runs file records of test.beside
// jobs, per job.
func ReadAttempts(t testing.TB, file string) map[int64][]Attempt {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[int64][]Attempt{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("attempts file line %q", line)
		}
		id, err1 := strconv.ParseInt(f[0], 10, 64)
		a, err2 := strconv.Atoi(f[1])
		tries, err3 := strconv.Atoi(f[2])
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatalf("attempts file line %q: %v", line, err)
		}
		out[id] = append(out[id], Attempt{a, tries})
	}
	return out
}
