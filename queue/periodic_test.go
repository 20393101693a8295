package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/periodic"
	"github.com/fleet-go/fleet/queue"
)

// BuildReport is the args of the "reports.build" job; its jobs default to
// the queue "reports" and three tries.
type BuildReport struct {
	Kind string `json:"kind"`
}

func (BuildReport) JobName() string { return "reports.build" }

func (BuildReport) JobOpts() queue.JobOpts { return queue.JobOpts{Queue: "reports", Tries: 3} }

func reportJobs() *queue.Registry {
	jobs := queue.NewRegistry()
	queue.HandleTyped(jobs, func(context.Context, *queue.Job, BuildReport) error { return nil })
	jobs.Handle("ops.heartbeat", func(context.Context, *queue.Job) error { return nil })
	return jobs
}

// A Go schedule carries its job whole: the typed args' payload and
// defaults, every option of the spec, and its tick options; a job that
// names no queue takes the Defaults' queue and name limit, as a dispatch
// would. The registry keeps its own copy of the spec.
func TestPeriodicSchedulesCarryTheJob(t *testing.T) {
	t.Parallel()
	jobs := reportJobs()
	spec := queue.NewTypedJob(BuildReport{Kind: "daily"}).Priority(-5).Backoff(10, 60).Timeout(2*time.Minute).
		Tags("nightly").Metadata(map[string]string{"team": "ops"}).Limit("reports", 2)
	jobs.Periodic("nightly-report", "0 3 * * *", spec,
		queue.PeriodicOpts{Timezone: "Europe/Paris", CatchUp: queue.CatchUpAll, CatchUpMax: 5, TickKey: "tick"})
	spec.OnQueue("elsewhere").Priority(7) // after registration: changes nothing registered
	jobs.Periodic("heartbeat", "@every 30s", queue.NewJob("ops.heartbeat", nil))

	got, err := jobs.PeriodicSchedules(queue.Defaults{Queue: "jobs", Limits: map[string]int{"ops.*": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "heartbeat" || got[1].Name != "nightly-report" {
		t.Fatalf("schedules %+v, want heartbeat then nightly-report", got)
	}
	hb, nightly := got[0], got[1]
	if hb.Source != periodic.SourceCode || hb.Spec.String() != "@every 30s (UTC)" || hb.Job != "ops.heartbeat" || hb.Queue != "jobs" ||
		string(hb.Payload) != `{}` || hb.CatchUp != periodic.CatchUpNone || hb.CatchUpMax != periodic.DefaultCatchUpMax || hb.TickKey != "" {
		t.Errorf("heartbeat: %+v", hb)
	}
	if o := hb.JobOpts; o.LimitKey != "name:ops.*" || o.Limit != 1 || o.Priority != 0 || o.MaxTries != 0 || o.BackoffSecs != nil || o.Tags != nil {
		t.Errorf("heartbeat's job options: %+v", o)
	}
	if nightly.Source != periodic.SourceCode || nightly.Spec.String() != "0 3 * * * (Europe/Paris)" || nightly.Job != "reports.build" ||
		nightly.Queue != "reports" || string(nightly.Payload) != `{"kind":"daily"}` || nightly.TickKey != "tick" ||
		nightly.CatchUp != periodic.CatchUpAll || nightly.CatchUpMax != 5 {
		t.Errorf("nightly-report: %+v", nightly)
	}
	o := nightly.JobOpts
	if o.Priority != -5 || o.MaxTries != 3 || !slices.Equal(o.BackoffSecs, []int{10, 60}) || o.Timeout != 2*time.Minute ||
		!slices.Equal(o.Tags, []string{"nightly"}) || string(o.Metadata) != `{"team":"ops"}` || o.LimitKey != "reports" || o.Limit != 2 {
		t.Errorf("nightly-report's job options: %+v", o)
	}
	// Each tick's payload is the args with the tick, in the schedule's zone.
	tick := time.Date(2025, 3, 30, 1, 0, 0, 0, time.UTC)
	payload, err := nightly.PayloadAt(tick)
	if err != nil {
		t.Fatal(err)
	}
	var args struct {
		BuildReport
		Tick string `json:"tick"`
	}
	if err := json.Unmarshal(payload, &args); err != nil || args.Kind != "daily" || args.Tick != "2025-03-30T03:00:00+02:00" {
		t.Errorf("payload at %v: %s (%v)", tick, payload, err)
	}
}

// Every registration is checked as a [fleet.periodic.NAME] table is, and
// as a dispatch checks its job; what a periodic job cannot be is refused.
// Each error names the schedule as the code does, Periodic("NAME").
func TestPeriodicRegistrationErrors(t *testing.T) {
	t.Parallel()
	good := func() *queue.JobSpec { return queue.NewTypedJob(BuildReport{Kind: "daily"}) }
	cases := []struct {
		name    string
		cron    string
		job     *queue.JobSpec
		opts    []queue.PeriodicOpts
		want    string
		invalid bool // the error wraps queue.ErrInvalidJob
	}{
		{name: "r", cron: "0 25 * * *", job: good(), want: `Periodic("r"): cron: "0 25 * * *": end of range (25) above maximum (23)`},
		{name: "r", cron: "0 0 3 * * *", job: good(), want: `Periodic("r"): cron: "0 0 3 * * *": expected exactly 5 fields`},
		{name: "r", cron: "0 0 30 2 *", job: good(), want: `Periodic("r"): cron: "0 0 30 2 *" never ticks`},
		{name: "r", cron: "CRON_TZ=Europe/Paris 0 3 * * *", job: good(), want: `Periodic("r"): cron: "CRON_TZ=Europe/Paris 0 3 * * *" names a time zone`},
		{name: "r", cron: "@every 1500ms", job: good(), want: `Periodic("r"): cron: "@every 1500ms": @every takes a whole number of seconds`},
		{name: "r", cron: "", job: good(), want: `Periodic("r"): cron: empty expression`},
		{name: "r", cron: "@daily", job: good(), opts: []queue.PeriodicOpts{{Timezone: "Europe/Pari"}},
			want: `Periodic("r"): PeriodicOpts.Timezone: unknown time zone "Europe/Pari"`},
		{name: "r", cron: "@daily", job: good(), opts: []queue.PeriodicOpts{{Timezone: "Local"}},
			want: `Periodic("r"): PeriodicOpts.Timezone must name a zone, not Local`},
		{name: "r", cron: "@daily", job: good(), opts: []queue.PeriodicOpts{{CatchUp: 9}},
			want: `Periodic("r"): PeriodicOpts.CatchUp must be CatchUpNone, CatchUpLast or CatchUpAll, got 9`},
		{name: "r", cron: "@daily", job: good(), opts: []queue.PeriodicOpts{{CatchUp: queue.CatchUpAll, CatchUpMax: 1001}},
			want: `Periodic("r"): PeriodicOpts.CatchUpMax must be 1 to 1000, got 1001`},
		{name: "r", cron: "@daily", job: good(), opts: []queue.PeriodicOpts{{CatchUpMax: -1}},
			want: `Periodic("r"): PeriodicOpts.CatchUpMax must be 1 to 1000, got -1`},
		{name: "r", cron: "@daily", job: good(), opts: []queue.PeriodicOpts{{}, {}},
			want: `Periodic("r"): takes at most one PeriodicOpts, got 2`},
		{name: "r", cron: "@daily", job: queue.NewJob("reports.build", []int{1}), opts: []queue.PeriodicOpts{{TickKey: "tick"}},
			want: `Periodic("r"): PeriodicOpts.TickKey needs a payload that is a JSON object, got [1]`},
		{name: " ", cron: "@daily", job: good(), want: `Periodic(" "): the name must not be empty`},
		{name: strings.Repeat("x", 201), cron: "@daily", job: good(), want: `the name must be at most 200 bytes, got 201`},
		{name: "r", cron: "@daily", job: nil, want: `Periodic("r"): needs a job (NewJob or NewTypedJob)`},
		{name: "r", cron: "@daily", job: queue.NewJob("reports.monthly", nil),
			want: `Periodic("r"): no handler is registered for job "reports.monthly" (registered: ops.heartbeat, reports.build)`},
		{name: "r", cron: "@daily", job: good().Unique(queue.Unique{ByArgs: true}), want: `Periodic("r"): job "reports.build" is Unique`},
		{name: "r", cron: "@daily", job: good().Delay(time.Minute), want: `Periodic("r"): job "reports.build" has a Delay`},
		{name: "r", cron: "@daily", job: good().RetryOf(12), want: `Periodic("r"): job "reports.build" is a RetryOf a failed job`},
		{name: "r", cron: "@daily", job: good().Tries(-1), want: `Periodic("r"): invalid job: job "reports.build": tries must be at least 1`, invalid: true},
		{name: "r", cron: "@daily", job: good().Priority(500), want: `Periodic("r"): invalid job: job "reports.build": JobSpec.Priority must be between -100 and 100, got 500`, invalid: true},
		{name: "r", cron: "@daily", job: good().Tags("a\nb"), want: `JobSpec.Tags[0] "a\nb" must not contain control characters`, invalid: true},
		{name: "r", cron: "@daily", job: good().Metadata([]int{1}), want: `JobSpec.Metadata: metadata must be a JSON object`, invalid: true},
		{name: "r", cron: "@daily", job: good().Limit("", 2), want: `JobSpec.Limit key must not be empty`, invalid: true},
		{name: "r", cron: "@daily", job: good().OnQueue("a,b"), want: `JobSpec.Queue "a,b" must not contain a comma`, invalid: true},
		{name: "r", cron: "@daily", job: queue.NewJob("reports.build", func() {}), want: `encode payload of job "reports.build"`, invalid: true},
		{name: "r", cron: "@daily", job: queue.NewJob("reports.build", map[string]string{"pad": strings.Repeat("x", 100)}),
			want: `payload is 110 bytes, more than the 64 allowed`, invalid: true},
	}
	for _, c := range cases {
		jobs := reportJobs()
		jobs.Periodic(c.name, c.cron, c.job, c.opts...)
		got, err := jobs.PeriodicSchedules(queue.Defaults{MaxPayloadBytes: 64})
		if err == nil || !strings.Contains(err.Error(), c.want) || got != nil {
			t.Errorf("%s %q: %v, %v; want an error holding %s", c.name, c.cron, got, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s %q: more than one line: %v", c.name, c.cron, err)
		}
		if errors.Is(err, queue.ErrInvalidJob) != c.invalid {
			t.Errorf("%s %q: errors.Is(err, ErrInvalidJob) = %v, want %v", c.name, c.cron, !c.invalid, c.invalid)
		}
	}
}

// Errors are all said at once, one line each, and a name registered twice
// is said once.
func TestPeriodicRegistrationErrorsJoined(t *testing.T) {
	t.Parallel()
	jobs := reportJobs()
	jobs.Periodic("a", "@daily", queue.NewJob("ops.heartbeat", nil))
	jobs.Periodic("twice", "@daily", queue.NewJob("ops.heartbeat", nil))
	jobs.Periodic("b", "0 25 * * *", queue.NewJob("ops.heartbeat", nil))
	jobs.Periodic("twice", "@hourly", queue.NewJob("ops.heartbeat", nil))
	jobs.Periodic("c", "@daily", queue.NewJob("ops.heartbeat", nil).Delay(time.Second))
	_, err := jobs.PeriodicSchedules(queue.Defaults{})
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{`Periodic("twice"): registered 2 times`, `Periodic("b"): cron:`, `Periodic("c"): job "ops.heartbeat" has a Delay`}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i+1, lines[i], w)
		}
	}
}

// A registry without periodic jobs has no schedules and no error.
func TestPeriodicSchedulesNone(t *testing.T) {
	t.Parallel()
	got, err := reportJobs().PeriodicSchedules(queue.Defaults{})
	if err != nil || len(got) != 0 {
		t.Fatalf("%v, %v", got, err)
	}
}
