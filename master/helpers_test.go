package master

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	svclife "github.com/fleet-go/fleet/internal/lifecycle"
	"github.com/fleet-go/fleet/internal/syncbuf"
	"github.com/fleet-go/fleet/internal/testwait"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// The helpers of the tests of one service at a time, shared with the
// tests of the whole master through export_test.go.

// poll waits until cond holds, for at most 15 s. It is the package's one
// polling helper: a test polls only what it cannot be signalled (rows
// written by another process, a database clock); what a service does is
// waited for on its test signals.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, 15*time.Second, what, cond)
}

// pollFor is poll with its own bound.
func pollFor(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, within, what, cond)
}

// signalWait bounds a wait for one test signal (see lifecycle.Signal.Wait).
const signalWait = svclife.SignalWait

// testClock is an injected clock that moves only when told.
type testClock = testwait.Clock

func newTestClock(at time.Time) *testClock { return testwait.NewClock(at) }

// fakePeers is a membership view set by the test: the instance, the view
// and whether it is trusted. Kicks are counted.
type fakePeers struct {
	instance string
	mu       sync.Mutex
	view     store.View
	trusted  bool
	kicks    int
}

func (f *fakePeers) Instance() string { return f.instance }

func (f *fakePeers) View() store.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.view
}

func (f *fakePeers) Trusted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.trusted
}

func (f *fakePeers) Kick() {
	f.mu.Lock()
	f.kicks++
	f.mu.Unlock()
}

func (f *fakePeers) set(v store.View, trusted bool) {
	f.mu.Lock()
	f.view, f.trusted = v, trusted
	f.mu.Unlock()
}

// svcEnv is what a service under test runs on: a fresh database, a store,
// settings with short intervals, a log to read, and its own stop budget.
type svcEnv struct {
	pool   *pgxpool.Pool
	st     *store.Store
	set    Settings
	logs   *syncbuf.Buffer
	log    *slog.Logger
	budget *stopBudget
}

// newEnv returns an environment on a fresh database with a stop budget
// of budget.
func newEnv(t *testing.T, budget time.Duration) *svcEnv {
	t.Helper()
	pool := pgtest.Pool(t)
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	set := Settings{Tick: 20 * time.Millisecond, BalanceCooldown: 60 * time.Millisecond, TTL: 2 * time.Second, Logger: log}.withDefaults()
	e := &svcEnv{pool: pool, st: store.New(pool), set: set, logs: logs, log: log, budget: newStopBudget(budget)}
	t.Cleanup(e.budget.release)
	return e
}

// exec runs sql on the test's database.
func (e *svcEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// count runs a count query.
func (e *svcEnv) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// member writes a live member row for instance (a master's) and returns
// the view that beat read.
func (e *svcEnv) member(t *testing.T, instance string, ttl time.Duration) store.View {
	t.Helper()
	v, err := e.st.MemberBeat(context.Background(), store.MemberBeatParams{
		Instance: instance, Name: instance, Host: "h", PID: 1, State: "running", TTL: ttl,
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// lockTables takes an ACCESS EXCLUSIVE lock on tables in a transaction
// held until the test ends (or the returned func): every statement of a
// service on them hangs, as on a frozen database.
func (e *svcEnv) lockTables(t *testing.T, tables ...string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatal(err)
		}
	}
	var once sync.Once
	unlock = func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(unlock)
	return unlock
}

// waitBlocked waits until a backend of the test's database waits on a
// lock.
func (e *svcEnv) waitBlocked(t *testing.T) {
	t.Helper()
	poll(t, "a statement waiting on the lock", func() bool {
		return e.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`) > 0
	})
}

// stopWithin stops s, logs how long that took, and fails the test when it
// took longer than within. A Stop that ends at once is bounded by
// testwait.Hang, which only catches a hang (stopPromptly); a bound of the
// stop budget's is the budget and what it leaves for the rest.
func stopWithin(t *testing.T, s service, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	s.Stop()
	took := time.Since(start)
	t.Logf("%s: Stop took %s", s.Name(), took.Round(time.Millisecond))
	if took > within {
		t.Errorf("%s: Stop took %s, want at most %s", s.Name(), took.Round(time.Millisecond), within)
	}
	return took
}

// stopPromptly stops a service with nothing left to wait for: how long it
// took is logged, and only a hang fails.
func stopPromptly(t *testing.T, s service) {
	t.Helper()
	stopWithin(t, s, testwait.Hang)
}

// discardLog is a logger that writes nowhere.
func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
