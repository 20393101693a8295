package faults_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/apptest"
)

// frozenStopBound is how long a master may take to stop on SIGTERM while
// its database is frozen (every server process SIGSTOPped): the workers'
// outcome-write grace (worker.DrainTimeout, 30 s) plus a few seconds.
const frozenStopBound = 40 * time.Second

// A master whose database froze still stops on SIGTERM within the bound,
// its children gone with it, and says in its last line what it could not
// write.
func testFrozenDatabaseStop(t *testing.T, _ *mmServer) {
	cluster := ownCluster(t)
	url := cluster.URL("postgres")
	dir := t.TempDir()
	if r := apptest.Run(t, dir, apptest.DBEnv(url), "migrate"); r.Code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	d := openDB(t, url)
	a := apptest.Start(t, dir, mmEnv(url, "frozen", "APP_FLEET__SUPERVISORS__WORK__MAX_PROCESSES=2"), "fleet")
	d.waitMember(a, 15*time.Second, "master trusted", member.trusted)
	apptest.Eventually(t, 15*time.Second, "two idle children", func() bool { return len(apptest.Children(a.PID())) == 2 })
	kids := apptest.Children(a.PID())
	d.pool.Close()
	time.Sleep(500 * time.Millisecond) // the test's own backends are gone

	b, err := os.ReadFile(filepath.Join(cluster.DataDir(), "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	postmaster, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	frozen := append([]int{postmaster}, apptest.Children(postmaster)...)
	freeze(t, frozen...)
	defer thaw(t, frozen...)
	time.Sleep(time.Second) // statements in flight now hang

	start := time.Now()
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done:
	case <-time.After(frozenStopBound + 20*time.Second):
		t.Fatalf("the master did not stop within %s of SIGTERM with its database frozen:\n%s", frozenStopBound+20*time.Second, tail(a.Output(), 3000))
	}
	took := time.Since(start)
	t.Logf("with the database frozen, the master stopped %s after SIGTERM (exit %d)", took.Round(time.Millisecond), a.Cmd.ProcessState.ExitCode())
	if took > frozenStopBound {
		t.Errorf("the master took %s to stop, over the bound of %s", took.Round(time.Millisecond), frozenStopBound)
	}
	if alive := slices.DeleteFunc(kids, func(pid int) bool { return !apptest.Alive(pid) }); len(alive) > 0 {
		t.Errorf("children %v outlived their master", alive)
	}
	lines := strings.Split(strings.TrimSpace(a.Output()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "fleet master stopped") {
		t.Errorf("the master's last line %q does not sum up its stop", last)
	}
}
