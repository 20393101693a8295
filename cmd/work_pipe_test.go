//go:build unix

package cmd_test

import (
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/spawner"
)

// A worker given a report pipe (spawner.ProtocolFDEnv, as a master gives
// one) writes its reports there and nothing on stdout; one whose announced
// pipe is not open refuses to run rather than report where nobody reads.
func TestWorkReportsOnTheAnnouncedPipe(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	dir := t.TempDir()
	if r := run(t, dir, dbEnv(url), "dispatch", "--name", "demo.noop", "--count", "3"); r.code != 0 {
		t.Fatalf("dispatch: %+v", r)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	// The worker's own descriptor, which it closes when done, as a child
	// does with the one it inherits.
	fd, err := unix.Dup(int(pw.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	pw.Close()
	env := append(dbEnv(url), spawner.ProtocolFDEnv+"="+strconv.Itoa(fd))
	r := run(t, dir, env, "fleet:work", "--stop-when-empty", "--reports")
	if r.code != 0 || strings.Contains(r.stdout, "@fleet") {
		t.Fatalf("work: %+v", r)
	}
	b, err := io.ReadAll(pr) // EOF: the worker closed its end
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	first, err := spawner.ParseReport(lines[0])
	if err != nil || first.Type != spawner.ReportReady {
		t.Fatalf("first line on the pipe %q: %+v, %v", lines[0], first, err)
	}
	last, err := spawner.ParseReport(lines[len(lines)-1])
	if err != nil || last.Type != spawner.ReportExiting || last.Reason != spawner.ExitEmpty || last.Jobs != 3 {
		t.Fatalf("last line on the pipe %q: %+v, %v", lines[len(lines)-1], last, err)
	}
	if n := countJobs(t, url, "queue_jobs"); n != 0 {
		t.Fatalf("%d jobs left", n)
	}

	bad := append(dbEnv(url), spawner.ProtocolFDEnv+"=987654")
	if r := run(t, dir, bad, "fleet:work", "--stop-when-empty", "--reports"); r.code == 0 || !strings.Contains(r.stderr, spawner.ProtocolFDEnv) {
		t.Fatalf("work with a report pipe that is not open: %+v", r)
	}
}
