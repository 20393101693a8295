package process

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/spawner"
)

func TestProgressLoggerLogsWhileBusyAndNotWhileIdle(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	report := progressLogger(log, 5*time.Second, clock)
	beat := func(after time.Duration, jobs int64, running int) int {
		now = now.Add(after)
		before := strings.Count(buf.String(), "\n")
		report(spawner.Report{Type: spawner.ReportHeartbeat, Jobs: jobs, Running: running})
		return strings.Count(buf.String(), "\n") - before
	}
	report(spawner.Report{Type: spawner.ReportReady})
	if n := beat(time.Second, 10, 4); n != 0 {
		t.Fatalf("a line after 1 s of work: %s", buf.String())
	}
	beat(time.Second, 20, 4)
	beat(time.Second, 30, 4)
	beat(time.Second, 40, 4)
	if n := beat(time.Second, 50, 4); n != 1 || !strings.Contains(buf.String(), "jobs=50 jobs_per_sec=10 running=4") {
		t.Fatalf("no progress line after 5 s of work: %q", buf.String())
	}
	// Work ends: one line at once, then nothing while idle.
	if n := beat(time.Second, 55, 0); n != 1 || !strings.Contains(buf.String(), "jobs=55") {
		t.Fatalf("no line when the work ended: %q", buf.String())
	}
	for range 10 {
		if n := beat(5*time.Second, 55, 0); n != 0 {
			t.Fatalf("a line while idle: %q", buf.String())
		}
	}
	// Other reports are not progress.
	report(spawner.Report{Type: spawner.ReportExiting, Jobs: 99})
	if strings.Contains(buf.String(), "jobs=99") {
		t.Fatalf("logged an exiting report: %q", buf.String())
	}
}
