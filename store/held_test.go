package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

func TestMaskSQL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"  ALTER ROLE app\n   PASSWORD 'hunter2'  ", "ALTER ROLE app PASSWORD '…'"},
		{"INSERT INTO t VALUES ('it''s', E'a\\'b', 3)", "INSERT INTO t VALUES ('…', '…', 3)"},
		{"SELECT $$secret$$, $tag$x $$ y$tag$, $1", "SELECT '…', '…', $1"},
		{"SELECT x FROM t -- token=abc\nWHERE y /* key */ = 2", "SELECT x FROM t WHERE y = 2"},
		{"UPDATE t SET a = 'unterminated secret", "UPDATE t SET a = '…'"},
		{"SELECT name$1, e'x', fee'", "SELECT name$1, '…', fee'…'"},
		{"SELECT 'é' || ü", "SELECT '…' || ü"},
	} {
		if got := store.MaskSQL(c.in, 100); got != c.want {
			t.Errorf("MaskSQL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	long := "SELECT " + strings.Repeat("ü", 200)
	if got := store.MaskSQL(long, 20); len([]rune(got)) != 20 || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "SELECT üü") {
		t.Errorf("MaskSQL of a long text = %q, want its first 19 characters and an ellipsis", got)
	}
}

// TestCleanupHolders: a session of the same database that took a
// transaction id and stays idle in its transaction is listed with its pid
// and application_name once it is older than the age asked for; the
// session asking is never listed, nor one that holds nothing.
func TestCleanupHolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	cfg := pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "monthly report"
	hold, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close(ctx)
	idle, err := pgx.ConnectConfig(ctx, cfg) // open, holding nothing
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close(ctx)
	if _, err := hold.Exec(ctx, `BEGIN; SELECT txid_current(), 'a secret' AS s`, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	pid := int(hold.PgConn().PID())
	hs, err := st.CleanupHolders(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].PID != pid || hs[0].ApplicationName != "monthly report" || hs[0].State != "idle in transaction" || hs[0].Age < 0 {
		t.Fatalf("holders %+v, want the one session holding a transaction open (pid %d)", hs, pid)
	}
	if q := hs[0].Query; strings.Contains(q, "secret") || !strings.HasPrefix(q, "BEGIN; SELECT txid_current(), '…'") {
		t.Errorf("the holder's statement shown as %q, want its start with the literal masked", q)
	}
	if hs, err := st.CleanupHolders(ctx, time.Hour, 10); err != nil || len(hs) != 0 {
		t.Fatalf("holders for an hour: %+v, %v; want none", hs, err)
	}
	if _, err := hold.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if hs, err := st.CleanupHolders(ctx, 0, 10); err != nil || len(hs) != 0 {
		t.Fatalf("holders after the rollback: %+v, %v; want none", hs, err)
	}
}
