package cmd_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/pgtest"
)

// A master whose fleet.http.addr is taken (a second master on the host with
// the default address) keeps supervising without the listener and says so
// once, naming the key.
func TestFleetRunsWithoutATakenListener(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	url := pgtest.URL(t)
	dir := t.TempDir()
	a := startApp(t, dir, fleetEnv(url, "APP_FLEET__HTTP__ADDR="+ln.Addr().String()), "fleet")
	eventually(t, 15*time.Second, "the master's workers to start", func() bool {
		return strings.Contains(a.Output(), "worker started")
	})
	out := a.Output()
	if n := strings.Count(out, "runs without its HTTP listener"); n != 1 || !strings.Contains(out, "fleet.http.addr") {
		t.Fatalf("want one warning naming fleet.http.addr, got %d:\n%s", n, out)
	}
}
