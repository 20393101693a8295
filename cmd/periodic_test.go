package cmd_test

// Periodic schedules ([fleet.periodic.NAME]) under real masters: each tick
// dispatched once across three masters while one is killed and another
// restarted, and a master down across a tick catching up as configured.
// The scenarios run side by side on a private cluster of their own
// (mmServer, as TestMultiMaster's), for some 40 s of wall time.

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
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

func TestPeriodicMultiMaster(t *testing.T) {
	t.Parallel()
	srv := newMMServer(t)
	scenarios := []struct {
		name string
		run  func(*testing.T, *mmServer)
	}{
		{"EverySecondUnderThreeMasters", testPeriodicThreeMasters},
		{"MasterDownAcrossATick", testPeriodicCatchUp},
	}
	var wg sync.WaitGroup
	for _, s := range scenarios {
		wg.Go(func() { t.Run(s.name, func(t *testing.T) { s.run(t, srv) }) })
	}
	wg.Wait()
}

// periodicEnv configures schedule name on @every with its ticks written
// into the payload under "tick", on queue ticks, which no supervisor
// works: the jobs stay in queue_jobs to be counted.
func periodicEnv(name, cron, catchUp string) []string {
	p := "APP_FLEET__PERIODIC__" + strings.ToUpper(name) + "__"
	return []string{p + "CRON=" + cron, p + "JOB=demo.noop", p + "QUEUE=ticks", p + "TICK_KEY=tick", p + "CATCH_UP=" + catchUp}
}

// jobTick is a dispatched job of a schedule and the tick in its payload.
type jobTick struct {
	id        int64
	tick      time.Time
	createdAt time.Time
}

// scheduleJobs returns the jobs of queue ticks whose payload's tick is of
// schedule name (by fleet_periodic_ticks), by tick.
func scheduleJobs(t *testing.T, d *mmDB, name string) []jobTick {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), `
		SELECT j.id, (j.payload->>'tick')::timestamptz, j.created_at FROM queue_jobs j
		WHERE j.queue = 'ticks' AND j.id IN (SELECT job_id FROM fleet_periodic_ticks WHERE name = $1)
		ORDER BY 2, 1`, name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []jobTick
	for rows.Next() {
		var j jobTick
		if err := rows.Scan(&j.id, &j.tick, &j.createdAt); err != nil {
			t.Fatal(err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitDB waits until the database clock passes at.
func waitDB(t *testing.T, d *mmDB, at time.Time) {
	t.Helper()
	eventually(t, time.Until(time.Now().Add(at.Sub(d.now())))+10*time.Second, "the database clock at "+at.String(), func() bool {
		return d.now().After(at)
	})
}

// A schedule @every 1s under three masters for 30 s; one is killed (-9)
// at 8 s, another stopped and started again at 16 s. Over the 30 s every
// tick is dispatched once: 30 ticks by tick time, 30 ± 1 jobs created in
// the 30 s of the database clock. catch_up = "all" so that a tick late
// under a loaded machine (no master's round within the grace) is still
// dispatched rather than skipped: what is checked is that masters never
// dispatch a tick twice nor lose one when they die around it.
func testPeriodicThreeMasters(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	sched := periodicEnv("tick", "@every 1s", "all")
	a := startApp(t, dir, mmEnv(url, "a", sched...), "fleet")
	b := startApp(t, dir, mmEnv(url, "b", sched...), "fleet")
	c := startApp(t, dir, mmEnv(url, "c", sched...), "fleet")
	for _, m := range []*app{a, b, c} {
		d.waitMember(m, 15*time.Second, "each master beating", func(member) bool { return true })
	}
	eventually(t, 10*time.Second, "a first tick", func() bool {
		return d.count(`SELECT count(*) FROM fleet_periodic_ticks WHERE name = 'tick'`) > 0
	})
	t0 := d.now().Truncate(time.Second)
	t.Logf("window (%s, %s]", t0.Format(time.RFC3339), t0.Add(30*time.Second).Format(time.RFC3339))

	waitDB(t, d, t0.Add(8*time.Second))
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitExit(t, a, 5*time.Second)
	killedAt := d.now()

	waitDB(t, d, t0.Add(16*time.Second))
	stopMasters(t, b)
	b2 := startApp(t, dir, mmEnv(url, "b", sched...), "fleet")
	restartedAt := d.now()

	// The last tick of the window, and a grace of 3 s (the ttl) more for
	// it to be dispatched.
	waitDB(t, d, t0.Add(30*time.Second+3500*time.Millisecond))
	jobs := scheduleJobs(t, d, "tick")
	stopMasters(t, c, b2)

	seen := map[int64]bool{}
	inWindow, created := 0, 0
	for i, j := range jobs {
		if i > 0 && j.tick.Equal(jobs[i-1].tick) {
			t.Errorf("tick %s dispatched twice: jobs %d and %d", j.tick.Format(time.RFC3339), jobs[i-1].id, j.id)
		}
		if j.tick.Nanosecond() != 0 {
			t.Errorf("job %d: tick %v is not a whole second", j.id, j.tick)
		}
		seen[j.id] = true
		if j.tick.After(t0) && !j.tick.After(t0.Add(30*time.Second)) {
			inWindow++
		}
		if !j.createdAt.Before(t0) && j.createdAt.Before(t0.Add(30*time.Second)) {
			created++
		}
	}
	// Every second of the window is there, once.
	for s := t0.Add(time.Second); !s.After(t0.Add(30 * time.Second)); s = s.Add(time.Second) {
		if !slices.ContainsFunc(jobs, func(j jobTick) bool { return j.tick.Equal(s) }) {
			t.Errorf("tick %s never dispatched", s.Format(time.RFC3339))
		}
	}
	t.Logf("ticks in the window: %d; jobs created in it: %d; in all %d jobs; killed a at %s, restarted b at %s",
		inWindow, created, len(jobs), killedAt.Format(time.RFC3339Nano), restartedAt.Format(time.RFC3339Nano))
	if inWindow != 30 {
		t.Errorf("%d ticks in the 30 s window, want 30", inWindow)
	}
	if created < 29 || created > 31 {
		t.Errorf("%d jobs created in the 30 s window, want 30 ± 1", created)
	}
	if n := d.count(`SELECT count(*) FROM fleet_periodic_ticks WHERE name = 'tick'`); n != len(jobs) || len(seen) != len(jobs) {
		t.Errorf("%d recorded ticks, %d jobs (%d distinct)", n, len(jobs), len(seen))
	}
	if n := d.count(`SELECT count(*) FROM queue_jobs WHERE queue = 'ticks'`); n != len(jobs) {
		t.Errorf("%d jobs on queue ticks, %d of them recorded with a tick", n, len(jobs))
	}
	t.Logf("ticks dispatched by %d different master instances", d.count(`SELECT count(DISTINCT dispatched_by) FROM fleet_periodic_ticks WHERE name = 'tick'`))
}

// One master with two @every 10s schedules, catch_up "last" and "none",
// stopped just after a tick and started again once the next tick is past
// the grace (the ttl, 3 s): "last" dispatches that missed tick once,
// "none" skips it.
func testPeriodicCatchUp(t *testing.T, srv *mmServer) {
	url := srv.url(t)
	d := openDB(t, url)
	dir := t.TempDir()
	env := mmEnv(url, "solo", append(periodicEnv("last", "@every 10s", "last"), periodicEnv("none", "@every 10s", "none")...)...)
	m := startApp(t, dir, env, "fleet")
	eventually(t, 15*time.Second, "a first tick of both", func() bool {
		return d.count(`SELECT count(DISTINCT name) FROM fleet_periodic_ticks`) == 2
	})
	stopMasters(t, m)
	first := scheduleJobs(t, d, "last")
	if len(first) != 1 {
		t.Fatalf("jobs of last before the stop: %+v", first)
	}
	x := first[0].tick
	missed := x.Add(10 * time.Second)
	if !d.now().Before(missed) {
		t.Fatalf("the master stopped after the next tick %s; the scenario needs it down across it", missed)
	}
	waitDB(t, d, missed.Add(mmTTL+500*time.Millisecond))
	m = startApp(t, dir, env, "fleet")
	eventually(t, 5*time.Second, "the missed tick of last", func() bool { return len(scheduleJobs(t, d, "last")) >= 2 })
	var decidedAt time.Time
	if err := d.pool.QueryRow(context.Background(), `SELECT updated_at FROM fleet_periodic WHERE name = 'none'`).Scan(&decidedAt); err != nil {
		t.Fatal(err)
	}
	last, none := scheduleJobs(t, d, "last"), scheduleJobs(t, d, "none")
	stopMasters(t, m)
	var lastTicks, noneTicks []time.Time
	for _, j := range last {
		if j.tick.Before(x.Add(20 * time.Second)) {
			lastTicks = append(lastTicks, j.tick)
		}
	}
	for _, j := range none {
		if j.tick.Before(x.Add(20 * time.Second)) {
			noneTicks = append(noneTicks, j.tick)
		}
	}
	if want := []time.Time{x, missed}; !slices.EqualFunc(lastTicks, want, time.Time.Equal) {
		t.Errorf("last: ticks before %s: %v, want %v (one dispatch for the missed tick)", x.Add(20*time.Second), lastTicks, want)
	}
	if want := []time.Time{x}; !slices.EqualFunc(noneTicks, want, time.Time.Equal) {
		t.Errorf("none: ticks before %s: %v, want %v", x.Add(20*time.Second), noneTicks, want)
	}
	if !decidedAt.Before(x.Add(20 * time.Second)) {
		t.Errorf("the restarted master's first round was at %s, after the next tick: the scenario did not run as meant", decidedAt)
	}
}
