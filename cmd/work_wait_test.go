package cmd_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/cmd"
	"github.com/fleet-go/fleet/spawner"
)

// A child started while the database is away waits for it instead of
// exiting (which its master would count as a crash), and still obeys its
// master's stop meanwhile: it exits 0.
func TestWorkUnderAMasterWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cmd.ExecuteContext(context.Background(), cmd.App{
			Jobs: appJobs(), Environ: []string{"APP_DATABASE__URL=postgres://app@127.0.0.1:1/app?connect_timeout=1"},
			Dir: t.TempDir(), Stdin: stdinR, Stdout: &out, Stderr: &errb,
			Args: []string{"fleet:work", "--master", "m-instance", "--worker-name", "w", "--queue", "default"},
		})
	}()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(errb.String(), "cannot connect to the database at start; waiting") {
		select {
		case code := <-done:
			t.Fatalf("fleet:work exited %d instead of waiting for the database:\n%s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiting line:\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// It tells its master why it is not ready yet, so that the start
	// timeout does not take it for hung.
	for !strings.Contains(out.String(), `"type":"waiting"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no waiting report on stdout:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	line, _, _ := strings.Cut(out.String(), "\n")
	rep, err := spawner.ParseReport(line)
	if err != nil || rep.Type != spawner.ReportWaiting || !strings.Contains(rep.Waiting, "cannot reach database") {
		t.Fatalf("first report %q: %+v, %v; want a waiting report saying why", line, rep, err)
	}
	if _, err := stdinW.Write(spawner.FormatCommand(spawner.Command{Type: spawner.CommandStop})); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after a stop while waiting, want 0:\n%s", code, errb.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a stop did not end the wait")
	}
}
