package config

import (
	"strings"
	"testing"
)

func TestPeriodicFromFileAndEnv(t *testing.T) {
	cfg := mustLoad(t, map[string]string{"config/app.toml": `
[fleet.periodic.nightly]
cron = "0 3 * * *"
job = "reports.nightly"
queue = "reports"
payload = '{"kind": "daily"}'
tick_key = "tick"
timezone = "Europe/Berlin"
catch_up = "all"
catch_up_max = 5

[fleet.periodic."every second"]
cron = "@every 1s"
job = "demo.noop"
`}, "APP_FLEET__PERIODIC__NIGHTLY__CATCH_UP=last", "APP_FLEET__PERIODIC__HOURLY__CRON=@hourly", "APP_FLEET__PERIODIC__HOURLY__JOB=demo.noop")
	n := cfg.Fleet.Periodic["nightly"]
	if n.Cron != "0 3 * * *" || n.Job != "reports.nightly" || n.Queue != "reports" || n.Payload != `{"kind": "daily"}` ||
		n.TickKey != "tick" || n.Timezone != "Europe/Berlin" || n.CatchUp != "last" || n.CatchUpMax == nil || *n.CatchUpMax != 5 {
		t.Fatalf("nightly: %+v", n)
	}
	if e := cfg.Fleet.Periodic["every second"]; e.Cron != "@every 1s" || e.CatchUp != "" || e.CatchUpMax != nil {
		t.Fatalf("every second: %+v", e)
	}
	if h := cfg.Fleet.Periodic["hourly"]; h.Cron != "@hourly" || h.Job != "demo.noop" {
		t.Fatalf("hourly from the environment: %+v", h)
	}
}

func TestPeriodicValidate(t *testing.T) {
	good := func() PeriodicConfig { return PeriodicConfig{Cron: "@hourly", Job: "demo.noop"} }
	for _, c := range []struct {
		name   string
		modify func(*PeriodicConfig)
		want   string
	}{
		{"good", func(*PeriodicConfig) {}, ""},
		{"every key", func(p *PeriodicConfig) {
			p.Queue, p.Payload, p.TickKey, p.Timezone, p.CatchUp, p.CatchUpMax = "q", `{"a":1}`, "tick", "Europe/Berlin", "all", intPtr(1000)
		}, ""},
		{"no cron", func(p *PeriodicConfig) { p.Cron = " " }, "fleet.periodic.x.cron: must not be empty"},
		{"no job", func(p *PeriodicConfig) { p.Job = "" }, "fleet.periodic.x.job: must not be empty"},
		{"catch_up", func(p *PeriodicConfig) { p.CatchUp = "some" }, `fleet.periodic.x.catch_up: must be none, last or all, got "some"`},
		{"catch_up_max 0", func(p *PeriodicConfig) { p.CatchUpMax = intPtr(0) }, "fleet.periodic.x.catch_up_max: must be 1 to 1000, got 0"},
		{"catch_up_max big", func(p *PeriodicConfig) { p.CatchUpMax = intPtr(1001) }, "fleet.periodic.x.catch_up_max: must be 1 to 1000, got 1001"},
		{"timezone", func(p *PeriodicConfig) { p.Timezone = "Europe/Berln" }, `fleet.periodic.x.timezone: unknown time zone "Europe/Berln" (an IANA name such as Europe/Berlin, or UTC)`},
		{"timezone Local", func(p *PeriodicConfig) { p.Timezone = "Local" }, "fleet.periodic.x.timezone: must name a zone, not Local"},
		{"payload", func(p *PeriodicConfig) { p.Payload = "{a: 1}" }, "fleet.periodic.x.payload: must be JSON"},
		{"payload size", func(p *PeriodicConfig) { p.Payload = `"` + strings.Repeat("a", 2000) + `"` }, "fleet.periodic.x.payload: is 2002 bytes, more than queue.max_payload_bytes (1000)"},
		{"tick_key with a list", func(p *PeriodicConfig) { p.Payload, p.TickKey = "[1]", "tick" }, "fleet.periodic.x.tick_key: needs a payload that is a JSON object"},
	} {
		cfg := Default()
		cfg.Queue.MaxPayloadBytes = 1000
		p := good()
		c.modify(&p)
		cfg.Fleet.Periodic = map[string]PeriodicConfig{"x": p}
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	cfg := Default()
	cfg.Fleet.Periodic = map[string]PeriodicConfig{"a b": {Job: "j"}}
	wantError(t, cfg.Validate(), `fleet.periodic."a b".cron: must not be empty`)
}

func TestPeriodicUnknownKey(t *testing.T) {
	_, err := loadFiles(t, map[string]string{"config/app.toml": "[fleet.periodic.n]\ncron = \"@hourly\"\njob = \"j\"\ncatchup = \"all\"\n"})
	wantError(t, err, "config/app.toml:4: unknown key fleet.periodic.n.catchup")
}
