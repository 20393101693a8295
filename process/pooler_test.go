package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/spawner"
)

// TestChildEnvCarriesTheDatabase: a child a master starts gets the
// master's database URL, pooler and direct URL in its environment,
// however the master's own environment differs, and none of them on its
// command line.
func TestChildEnvCarriesTheDatabase(t *testing.T) {
	t.Setenv("APP_DATABASE__POOLER", "none") // the master's environment says otherwise
	var out syncbuf.Buffer
	var args []string
	sp, err := spawner.NewProcessSpawner(spawner.ProcessOptions{
		Executable: "/bin/sh", Output: &out,
		Args: func(s spawner.Spec) []string {
			args = spawner.WorkArgs(s)
			return []string{"-c", "env | grep '^APP_DATABASE__' | sort"}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	d := Database{URL: "postgres://app:pw1@bouncer:6432/app", DirectURL: "postgres://app:pw2@primary:5432/app", Pooler: "transaction"}
	d.ChildEnv(sp)
	events := make(chan spawner.Event, 16)
	if _, err := sp.Spawn(context.Background(), spawner.Spec{Supervisor: "s", Queues: []string{"q"}, Worker: "w", Concurrency: 1}, events); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for exited := false; !exited; {
		select {
		case e := <-events:
			exited = e.Exit != nil
		case <-timeout:
			t.Fatal("the child did not exit within 10 s")
		}
	}
	for _, want := range []string{
		"APP_DATABASE__DIRECT_URL=postgres://app:pw2@primary:5432/app",
		"APP_DATABASE__POOLER=transaction",
		"APP_DATABASE__URL=postgres://app:pw1@bouncer:6432/app",
	} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("the child's environment lacks %s:\n%s", want, out.String())
		}
	}
	if line := strings.Join(args, " "); strings.Contains(line, "pw1") || strings.Contains(line, "pw2") || strings.Contains(line, "transaction") {
		t.Errorf("the command line carries the database: %s", line)
	}
}

// A worker under a master waits for a database that did not answer, or
// answered with a passing refusal (no connection slot left, a statement
// timeout as the session opened), and exits on one that refused it for
// good: bad credentials, no such database.
func TestWorkerWaitsOnlyForADatabaseThatMayComeBack(t *testing.T) {
	t.Parallel()
	url := "postgres://u:secret@db.example:5432/app"
	for _, c := range []struct {
		err  error
		wait bool
	}{
		{newConnectError("database.url", url, "u", "app", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{newConnectError("database.url", url, "u", "app", &pgconn.PgError{Code: "53300"}), true},
		{newConnectError("database.url", url, "u", "app", fmt.Errorf("turn JIT off for the session: %w", &pgconn.PgError{Code: "57014"})), true},
		{newConnectError("database.url", url, "u", "app", &pgconn.PgError{Code: "57P03"}), true},
		{newConnectError("database.url", url, "u", "app", &pgconn.PgError{Code: "28P01"}), false},
		{newConnectError("database.url", url, "u", "app", &pgconn.PgError{Code: "3D000"}), false},
		{errors.New("database.url is not a valid connection string"), false},
	} {
		if got := waitForDatabase(c.err); got != c.wait {
			t.Errorf("waitForDatabase(%v) = %v, want %v", c.err, got, c.wait)
		}
	}
}
