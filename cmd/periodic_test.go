package cmd_test

// The periodic commands: boot rules of [fleet.periodic.NAME] and
// fleet:periodic. The schedules under real masters are in package faults.

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

func TestPeriodicBootRules(t *testing.T) {
	t.Parallel()
	base := []string{"APP_FLEET__PERIODIC__NIGHTLY__CRON=0 3 * * *", "APP_FLEET__PERIODIC__NIGHTLY__JOB=demo.noop"}
	cases := map[string]struct {
		env  []string
		want string
	}{
		"bad expression":     {[]string{"APP_FLEET__PERIODIC__NIGHTLY__CRON=0 25 * * *"}, "fleet.periodic.nightly.cron:"},
		"six fields":         {[]string{"APP_FLEET__PERIODIC__NIGHTLY__CRON=0 0 3 * * *"}, "fleet.periodic.nightly.cron:"},
		"never ticks":        {[]string{"APP_FLEET__PERIODIC__NIGHTLY__CRON=0 0 30 2 *"}, "fleet.periodic.nightly.cron:"},
		"bad time zone":      {[]string{"APP_FLEET__PERIODIC__NIGHTLY__TIMEZONE=Europe/Berln"}, `fleet.periodic.nightly.timezone: unknown time zone "Europe/Berln"`},
		"unregistered job":   {[]string{"APP_FLEET__PERIODIC__NIGHTLY__JOB=reports.nightly"}, `fleet.periodic.nightly.job: no handler is registered for job "reports.nightly"`},
		"bad catch-up":       {[]string{"APP_FLEET__PERIODIC__NIGHTLY__CATCH_UP=everything"}, "fleet.periodic.nightly.catch_up: must be none, last or all"},
		"bad payload":        {[]string{"APP_FLEET__PERIODIC__NIGHTLY__PAYLOAD={nope"}, "fleet.periodic.nightly.payload: must be JSON"},
		"missing job":        {[]string{"APP_FLEET__PERIODIC__HOURLY__CRON=@hourly"}, "fleet.periodic.hourly.job: must not be empty"},
		"unknown key":        {[]string{"APP_FLEET__PERIODIC__NIGHTLY__EVERY=1h"}, "unknown key fleet.periodic.nightly.every"},
		"bad queue":          {[]string{"APP_FLEET__PERIODIC__NIGHTLY__QUEUE=a\tb"}, "fleet.periodic.nightly.queue"},
		"tick_key with list": {[]string{"APP_FLEET__PERIODIC__NIGHTLY__PAYLOAD=[1]", "APP_FLEET__PERIODIC__NIGHTLY__TICK_KEY=tick"}, "fleet.periodic.nightly.tick_key"},
	}
	for name, c := range cases {
		env := append(dbEnv("postgres://app:hunter2@127.0.0.1:1/app"), append(slices.Clone(base), c.env...)...)
		r := run(t, t.TempDir(), env, "fleet")
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: %+v, want one line naming %q", name, r, c.want)
		}
	}
	// A good schedule passes the checks: the boot gets as far as the
	// (unreachable) database.
	r := run(t, t.TempDir(), append(dbEnv("postgres://app:hunter2@127.0.0.1:1/app"), base...), "fleet")
	if r.code == 0 || !strings.Contains(r.stderr, "cannot reach database") {
		t.Errorf("good schedule: %+v", r)
	}
}

func TestPeriodicCommand(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	env := append(dbEnv(url),
		"APP_FLEET__PERIODIC__NIGHTLY__CRON=0 3 * * *", "APP_FLEET__PERIODIC__NIGHTLY__JOB=demo.noop",
		"APP_FLEET__PERIODIC__NIGHTLY__TIMEZONE=Europe/Berlin", "APP_FLEET__PERIODIC__NIGHTLY__CATCH_UP=all",
		"APP_FLEET__PERIODIC__NIGHTLY__QUEUE=reports")
	dir := t.TempDir()
	r := run(t, dir, env, "fleet:periodic")
	if r.code != 0 || !strings.Contains(r.stdout, "nightly") || !strings.Contains(r.stdout, "0 3 * * *") || !strings.Contains(r.stdout, "all (max 10)") {
		t.Fatalf("before any master: %+v", r)
	}
	// What a master's round leaves: a cursor, a tick and its job; and a
	// schedule the configuration no longer has.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO fleet_periodic (name, cursor_at) VALUES ('nightly', now() - interval '2 days'), ('gone', now())`); err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	var from time.Time
	if err := conn.QueryRow(ctx, `SELECT cursor_at FROM fleet_periodic WHERE name = 'nightly'`).Scan(&from); err != nil {
		t.Fatal(err)
	}
	y := from.In(berlin)
	tick := time.Date(y.Year(), y.Month(), y.Day(), 3, 0, 0, 0, berlin)
	if !tick.After(from) {
		tick = tick.AddDate(0, 0, 1)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	res, err := store.New(pool).PeriodicDispatch(ctx, store.PeriodicDispatchParams{
		Name: "nightly", From: from, To: tick, Ticks: []time.Time{tick},
		Jobs: []store.JobInsertParams{{Queue: "reports", Name: "demo.noop", Payload: []byte(`{}`)}}, By: "test",
	})
	if err != nil || !res.Won {
		t.Fatalf("dispatch: %+v, %v", res, err)
	}
	r = run(t, dir, env, "fleet:periodic", "--json", "--recent", "5")
	if r.code != 0 {
		t.Fatalf("json: %+v", r)
	}
	var v struct {
		At        time.Time `json:"at"`
		Schedules []struct {
			Name       string     `json:"name"`
			Configured bool       `json:"configured"`
			Cron       string     `json:"cron"`
			Timezone   string     `json:"timezone"`
			NextTick   *time.Time `json:"next_tick"`
			DueSince   *time.Time `json:"due_since"`
			LastTick   *time.Time `json:"last_tick"`
			LastJobID  *int64     `json:"last_job_id"`
			Recent     []struct {
				Tick  time.Time `json:"tick"`
				JobID int64     `json:"job_id"`
			} `json:"recent_ticks"`
		} `json:"schedules"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if len(v.Schedules) != 2 || v.Schedules[0].Name != "nightly" || !v.Schedules[0].Configured || v.Schedules[1].Name != "gone" || v.Schedules[1].Configured {
		t.Fatalf("schedules: %s", r.stdout)
	}
	n := v.Schedules[0]
	if n.LastTick == nil || !n.LastTick.Equal(tick) || n.LastJobID == nil || *n.LastJobID != res.IDs[0] ||
		len(n.Recent) != 1 || n.Recent[0].JobID != res.IDs[0] || !n.Recent[0].Tick.Equal(tick) {
		t.Fatalf("nightly's last tick: %s", r.stdout)
	}
	if n.NextTick == nil || !n.NextTick.After(v.At) || n.NextTick.Sub(v.At) > 25*time.Hour || n.NextTick.In(berlin).Hour() != 3 {
		t.Fatalf("nightly's next tick %v at %v", n.NextTick, v.At)
	}
	// The day after the dispatched tick came due long ago and no master
	// decided it.
	if n.DueSince == nil || !n.DueSince.Equal(tick.AddDate(0, 0, 1)) {
		t.Fatalf("due since %v, want %v", n.DueSince, tick.AddDate(0, 0, 1))
	}
	r = run(t, dir, env, "fleet:periodic")
	if r.code != 0 || !strings.Contains(r.stdout, tick.Format(time.RFC3339)) || !strings.Contains(r.stdout, "gone (not configured)") {
		t.Fatalf("table: %+v", r)
	}
}
