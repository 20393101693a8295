package fleettest_test

// A sample application's tests, written with the kit the way an app's own
// would be: the app's job types, its registry and a service function sit
// here in place of the app's packages.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/queue"
)

// Signup is the job that finishes a user's signup.
type Signup struct {
	UserID int64  `json:"user_id"`
	Email  string `json:"email"`
}

func (Signup) JobName() string { return "user.signup" }

// WelcomeMail is the job that mails a new user, dispatched by Signup.
type WelcomeMail struct {
	UserID int64  `json:"user_id"`
	Email  string `json:"email"`
}

func (WelcomeMail) JobName() string { return "mail.welcome" }

// mailer stands in for the app's mail provider: its first failures sends
// fail, as a flaky provider's would.
type mailer struct {
	mu       sync.Mutex
	failures int
	sent     []string
}

func (m *mailer) send(to string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failures > 0 {
		m.failures--
		return errors.New("smtp: 421 try again later")
	}
	m.sent = append(m.sent, to)
	return nil
}

// appJobs builds the app's registry, as its main does.
func appJobs(pool *pgxpool.Pool, client *queue.Client, mail *mailer) *queue.Registry {
	jobs := queue.NewRegistry()
	queue.HandleTyped(jobs, func(ctx context.Context, job *queue.Job, args Signup) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `UPDATE users SET active = true WHERE id = $1`, args.UserID); err != nil {
			return fmt.Errorf("activate user %d: %w", args.UserID, err)
		}
		//lint:ignore S1016 the mail's fields are spelled out: it is a job of its own, not the signup
		welcome := queue.NewTypedJob(WelcomeMail{UserID: args.UserID, Email: args.Email}).
			OnQueue("mail").Tags(fmt.Sprintf("user:%d", args.UserID)).Backoff(30)
		if _, err := client.DispatchTx(ctx, tx, welcome); err != nil {
			return err
		}
		if err := job.CompleteTx(ctx, tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	queue.HandleTyped(jobs, func(ctx context.Context, job *queue.Job, args WelcomeMail) error {
		return mail.send(args.Email)
	})
	return jobs
}

// signUp is the app's service: it creates the user and dispatches the
// rest of the signup in the same transaction.
func signUp(ctx context.Context, tx pgx.Tx, client *queue.Client, email string) (int64, error) {
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO users (email) VALUES ($1) RETURNING id`, email).Scan(&id); err != nil {
		return 0, fmt.Errorf("create user: %w", err)
	}
	if _, err := client.DispatchTx(ctx, tx, queue.NewTypedJob(Signup{UserID: id, Email: email})); err != nil {
		return 0, err
	}
	return id, nil
}

// appDB is a test database with the app's table.
func appDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := fleettest.Pool(t)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE users (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text NOT NULL, active boolean NOT NULL DEFAULT false)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

// TestSignUpDispatchesInItsTransaction: the service's job exists in its
// transaction, and outside it only once it commits.
func TestSignUpDispatchesInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := appDB(t)
	client := queue.NewClient(pool, queue.Defaults{})

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	id, err := signUp(ctx, tx, client, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	fleettest.RequireDispatchedTx(t, tx, "user.signup", fleettest.Args(Signup{UserID: id, Email: "ann@example.com"}))
	fleettest.RequireNotDispatched(t, pool, "user.signup")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	fleettest.RequireDispatchedArgs(t, pool, Signup{UserID: id, Email: "ann@example.com"}, fleettest.OnQueue("default"))
}

// TestSignUpSendsWelcomeMail: the signup job activates the user and
// dispatches the welcome mail in its transaction; the mail's first attempt
// fails and its retry waits out its backoff until MakeDue.
func TestSignUpSendsWelcomeMail(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := appDB(t)
	client := queue.NewClient(pool, queue.Defaults{})
	mail := &mailer{failures: 1}
	jobs := appJobs(pool, client, mail)

	var id int64
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		id, err = signUp(ctx, tx, client, "ann@example.com")
		return err
	}); err != nil {
		t.Fatal(err)
	}

	counts := fleettest.Drain(ctx, t, pool, jobs, "default")
	if counts.Completed != 1 || counts.Attempts() != 1 {
		t.Fatalf("signup drain: %+v", counts)
	}
	var active bool
	if err := pool.QueryRow(ctx, `SELECT active FROM users WHERE id = $1`, id).Scan(&active); err != nil || !active {
		t.Fatalf("user %d active: %v, %v", id, active, err)
	}
	fleettest.RequireNotDispatched(t, pool, "user.signup")
	welcome := fleettest.RequireDispatchedArgs(t, pool, WelcomeMail{UserID: id, Email: "ann@example.com"},
		fleettest.OnQueue("mail"), fleettest.Tags(fmt.Sprintf("user:%d", id)))

	counts = fleettest.Drain(ctx, t, pool, jobs, "mail")
	if counts.Retried != 1 || counts.Completed != 0 || counts.Events[0].Error != "smtp: 421 try again later" {
		t.Fatalf("first mail drain: %+v", counts)
	}
	if job := fleettest.RequireDispatched(t, pool, "mail.welcome"); job.ID != welcome.ID || job.State != "delayed" {
		t.Fatalf("the retry waits out its 30 s backoff: %+v", job)
	}

	fleettest.MakeDue(t, pool, "mail")
	counts = fleettest.Drain(ctx, t, pool, jobs, "mail")
	if counts.Completed != 1 || counts.Events[0].Attempt != 2 {
		t.Fatalf("mail drain after MakeDue: %+v", counts)
	}
	if !slices.Equal(mail.sent, []string{"ann@example.com"}) {
		t.Errorf("mails sent: %v", mail.sent)
	}
	fleettest.RequireNotDispatched(t, pool, "mail.welcome")
}
