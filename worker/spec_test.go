package worker_test

import (
	"bytes"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/worker"
)

// The spec says which worker; the base fills what it leaves open. (The
// round trip through fleet:work's flags is tested in package cmd.)
func TestSpecConfig(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	base := worker.Config{
		Queues: []string{"configured"}, Concurrency: 3, Tries: 9, Backoff: []int{2, 4}, DefaultTimeout: time.Minute,
		PollInterval: 50 * time.Millisecond, TimeoutGrace: time.Second, Redact: []string{"secret"},
		MaxJobs: 11, Name: "base", Master: "base-master", Paused: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	spec := spawner.Spec{
		Supervisor: "mailers", Queues: []string{"mail"}, Master: "m", MasterTTL: 12 * time.Second, Worker: "w",
		Concurrency: 7, MaxTime: 90 * time.Second, MaxMemoryMB: 256, Tries: 4, Backoff: []int{1, 5}, Timeout: 45 * time.Second,
		PausedQueues: []string{"mail"}, MaxConns: 5,
	}
	got := worker.SpecConfig(spec, base)
	got.Logger.Info("hello")
	if !strings.Contains(logs.String(), "supervisor=mailers") {
		t.Errorf("the logger does not say the supervisor: %q", logs.String())
	}
	got.Logger = nil
	want := worker.Config{
		Queues: []string{"mail"}, Concurrency: 7, Tries: 4, Backoff: []int{1, 5}, DefaultTimeout: 45 * time.Second,
		PollInterval: 50 * time.Millisecond, TimeoutGrace: time.Second, Redact: []string{"secret"},
		MaxTime: 90 * time.Second, MaxMemoryMB: 256, Name: "w", Master: "m", MasterTTL: 12 * time.Second,
		PausedQueues: []string{"mail"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SpecConfig:\n got %+v\nwant %+v", got, want)
	}

	// A spec that sets no queues, concurrency or job defaults keeps the
	// base's; an empty backoff is no backoff of its own, as the flags it
	// becomes say none.
	got = worker.SpecConfig(spawner.Spec{Backoff: []int{}}, base)
	if !reflect.DeepEqual(got.Queues, base.Queues) || got.Concurrency != 3 || got.Tries != 9 ||
		!reflect.DeepEqual(got.Backoff, base.Backoff) || got.DefaultTimeout != time.Minute {
		t.Errorf("a spec that leaves them open: %+v, want the base's queues, concurrency and job defaults", got)
	}
	// Its limits, pause state and names are the spec's, set or not.
	if got.MaxJobs != 0 || got.Name != "" || got.Master != "" || got.Paused {
		t.Errorf("a spec without limits, names or pause: %+v, want none of the base's", got)
	}
	if got.Logger != base.Logger {
		t.Error("a spec without a supervisor changed the logger")
	}
}
