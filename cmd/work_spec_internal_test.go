package cmd

import (
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/process"
	"github.com/fleet-go/fleet/spawner"
	"github.com/fleet-go/fleet/worker"
)

// parseWorkArgs reads args, a fleet:work command line as spawner.WorkArgs
// writes it, with the command's own flags into a spec.
func parseWorkArgs(t *testing.T, args []string) (workFlags, spawner.Spec) {
	t.Helper()
	if len(args) == 0 || args[0] != "fleet:work" {
		t.Fatalf("command line %q does not start with fleet:work", args)
	}
	var f workFlags
	c := &cobra.Command{Use: "fleet:work"}
	f.register(c)
	if err := c.ParseFlags(args[1:]); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	spec, err := f.spec()
	if err != nil {
		t.Fatalf("spec of %q: %v", args, err)
	}
	return f, spec
}

// withoutLogger is cfg without its logger, which a comparison cannot look
// into.
func withoutLogger(cfg worker.Config) worker.Config {
	cfg.Logger = nil
	return cfg
}

// A spec goes to a worker process as flags (spawner.WorkArgs) and comes
// back from fleet:work's flag parsing as the same spec, which becomes the
// same worker.Config there as worker.SpecConfig makes of it directly, as
// the in-process spawner does.
func TestWorkFlagsRoundTripASpec(t *testing.T) {
	t.Parallel()
	full := spawner.Spec{
		Supervisor:    "mailers",
		Queues:        []string{"mail", "default"},
		Master:        "0123456789abcdef",
		MasterTTL:     12 * time.Second,
		Worker:        "web-1:4242:9f3a1c2e",
		Concurrency:   7,
		MaxJobs:       500,
		MaxTime:       90 * time.Second,
		MaxMemoryMB:   256,
		Tries:         4,
		Backoff:       []int{1, 5, 30},
		Timeout:       45 * time.Second,
		PayloadBudget: 8 << 20,
		Paused:        true,
		PausedQueues:  []string{"mail"},
		MaxConns:      5,
		Isolate:       true,
	}
	// The full spec sets every field, so that a field added to Spec but not
	// to the flags fails here.
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the full spec leaves %s unset", v.Type().Field(i).Name)
		}
	}
	least := spawner.Spec{Supervisor: "default", Queues: []string{"default"}, Master: "fedcba9876543210", Worker: "w", Concurrency: 1}
	unbounded := least
	unbounded.PayloadBudget = -1

	cfg := config.Default()
	cfg.Queue.Queues = []string{"configured"}
	cfg.Queue.Tries = 9
	cfg.Queue.Backoff = []int{2, 4}
	cfg.Queue.TimeoutSecs = 600
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, spec := range []spawner.Spec{full, least, unbounded} {
		f, got := parseWorkArgs(t, spawner.WorkArgs(spec))
		if !reflect.DeepEqual(got, spec) {
			t.Errorf("spec -> flags -> spec:\n got %+v\nwant %+v", got, spec)
		}
		if f.stopWhenEmpty || f.reports {
			t.Errorf("a master's command line set --stop-when-empty or --reports: %+v", f)
		}
		fromFlags := process.WorkerConfig(&cfg, got, log)
		direct := worker.SpecConfig(spec, process.WorkerConfig(&cfg, spawner.Spec{}, log))
		if !reflect.DeepEqual(withoutLogger(fromFlags), withoutLogger(direct)) {
			t.Errorf("config from the flags:\n %+v\nfrom the spec directly:\n %+v", withoutLogger(fromFlags), withoutLogger(direct))
		}
	}

	// What the spec leaves open comes from the queue section; a budget of
	// no bound is none.
	if wcfg := process.WorkerConfig(&cfg, least, log); wcfg.PayloadBudget != int64(cfg.Queue.PayloadBudgetBytes) {
		t.Errorf("the byte budget of a spec that sets none: %d, want queue.payload_budget_bytes", wcfg.PayloadBudget)
	}
	if wcfg := process.WorkerConfig(&cfg, unbounded, log); wcfg.PayloadBudget >= 0 {
		t.Errorf("the byte budget of a spec that asks for no bound: %d, want negative", wcfg.PayloadBudget)
	}
	wcfg := process.WorkerConfig(&cfg, least, log)
	if wcfg.Tries != 9 || !reflect.DeepEqual(wcfg.Backoff, []int{2, 4}) || wcfg.DefaultTimeout != 600*time.Second {
		t.Errorf("the job defaults of a spec that sets none: tries %d, backoff %v, timeout %s; want the queue section's",
			wcfg.Tries, wcfg.Backoff, wcfg.DefaultTimeout)
	}
	// A worker run by hand without --queue works the configured queues.
	if wcfg := process.WorkerConfig(&cfg, spawner.Spec{}, log); !reflect.DeepEqual(wcfg.Queues, []string{"configured"}) || wcfg.Concurrency != cfg.Queue.Workers {
		t.Errorf("queues %v, concurrency %d without flags; want the queue section's", wcfg.Queues, wcfg.Concurrency)
	}
}

// The one difference: a process counts its time limit in whole seconds,
// and a limit below a second must not become "never".
func TestWorkArgsRoundMaxTimeUp(t *testing.T) {
	t.Parallel()
	spec := spawner.Spec{Supervisor: "s", Queues: []string{"default"}, Master: "m", Worker: "w", Concurrency: 1, MaxTime: 1500 * time.Millisecond}
	if _, got := parseWorkArgs(t, spawner.WorkArgs(spec)); got.MaxTime != 2*time.Second {
		t.Errorf("max time %s through the flags, want 2s", got.MaxTime)
	}
	spec.MaxTime = time.Millisecond
	if _, got := parseWorkArgs(t, spawner.WorkArgs(spec)); got.MaxTime != time.Second {
		t.Errorf("max time %s through the flags, want 1s", got.MaxTime)
	}
}
