package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// TestReportExpandingStatementsRunWithoutJIT: the statements that expand
// the masters' JSON reports (Workload, the scrape) never start
// PostgreSQL's JIT compiler, on a session where any other statement does
// (jit on, jit_above_cost 0) and that sets nothing of fleet's, as through
// a transaction pooler. auto_explain at notice level shows the session
// each plan, with a JIT section when it compiled.
func TestReportExpandingStatementsRunWithoutJIT(t *testing.T) {
	pc, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	var mu sync.Mutex
	var plans []string
	pc.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		plans = append(plans, n.Message)
	}
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		for _, sql := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
			"SET auto_explain.log_level = notice", "SET jit = on", "SET jit_above_cost = 0"} {
			if _, err := c.Exec(ctx, sql); err != nil {
				return err
			}
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var available bool
	if err := pool.QueryRow(t.Context(), "SELECT pg_jit_available()").Scan(&available); err != nil {
		t.Skipf("no auto_explain to watch the plans with: %v", err)
	}
	if !available {
		t.Skip("this PostgreSQL has no JIT compiler (pg_jit_available() is false): nothing to turn off")
	}
	taken := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := plans
		plans = nil
		return out
	}
	taken()
	// The control: on this session a statement over fleet's tables compiles.
	if _, err := pool.Exec(t.Context(), "SELECT count(*) FROM fleet_masters"); err != nil {
		t.Fatal(err)
	}
	if got := taken(); len(got) != 1 || !strings.Contains(got[0], "JIT:") {
		t.Fatalf("the control statement did not compile, the test proves nothing: %q", got)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO fleet_masters (instance, kind, name, host, pid, report, expires_at)
		VALUES ('i1', 'master', 'm1', 'h', 1, '{"supervisors":[{"name":"w","processes":{"default":2}}]}', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	taken()
	st := store.New(pool)
	if _, err := st.Workload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ScrapeRead(t.Context()); err != nil {
		t.Fatal(err)
	}
	expanding := 0
	for _, p := range taken() {
		if !strings.Contains(p, "jsonb_array_elements") {
			continue
		}
		expanding++
		if strings.Contains(p, "JIT:") {
			t.Errorf("a statement expanding the masters' reports compiled:\n%s", p)
		}
	}
	if expanding != 2 {
		t.Errorf("saw %d plans of statements expanding the masters' reports, want 2 (Workload and the scrape)", expanding)
	}
}
