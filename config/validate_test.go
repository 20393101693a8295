package config

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *Config)
		want   string // "" for valid
	}{
		{name: "default is valid", modify: func(*Config) {}},
		{name: "a nested dashboard path", modify: func(c *Config) { c.Fleet.Path = "/admin/ops-1/fleet" }},
		{name: "dashboard path without a slash", modify: func(c *Config) { c.Fleet.Path = "_fleet" }, want: `fleet.path: must be a URL path such as /_fleet (a leading slash, no trailing one), got "_fleet"`},
		{name: "dashboard path with a trailing slash", modify: func(c *Config) { c.Fleet.Path = "/_fleet/" }, want: `fleet.path: must be a URL path such as /_fleet (a leading slash, no trailing one), got "/_fleet/"`},
		{name: "root dashboard path", modify: func(c *Config) { c.Fleet.Path = "/" }, want: `fleet.path: must be a URL path such as /_fleet (a leading slash, no trailing one), got "/"`},
		{name: "empty dashboard path", modify: func(c *Config) { c.Fleet.Path = "" }, want: `fleet.path: must be a URL path such as /_fleet (a leading slash, no trailing one), got ""`},
		{name: "dashboard path with dots", modify: func(c *Config) { c.Fleet.Path = "/a/../b" }, want: `fleet.path: must not hold an empty, . or .. segment, got "/a/../b"`},
		{name: "dashboard path with a double slash", modify: func(c *Config) { c.Fleet.Path = "/a//b" }, want: `fleet.path: must not hold an empty, . or .. segment, got "/a//b"`},
		{name: "dashboard path with a query", modify: func(c *Config) { c.Fleet.Path = "/fleet?x" }, want: `fleet.path: may hold only letters, digits, . _ ~ - and slashes, got "/fleet?x"`},
		{name: "dashboard path on the metrics", modify: func(c *Config) { c.Fleet.Path = "/metrics" }, want: `fleet.path: must not be /metrics, which the master serves itself, got "/metrics"`},
		{name: "dashboard path under healthz", modify: func(c *Config) { c.Fleet.Path = "/healthz/ui" }, want: `fleet.path: must not be /healthz, which the master serves itself, got "/healthz/ui"`},
		{
			name: "all allowed values",
			modify: func(c *Config) {
				c.Queue.Driver, c.Log.Level, c.Log.Format = "memory", "debug", "json"
				c.Queue.Workers, c.Queue.Tries, c.Queue.TimeoutSecs = 1, 1, 1
				c.Queue.Backoff = []int{0}
				c.Queue.TimeoutGraceSecs, c.Queue.PollIntervalMs = 0, 10
				c.Queue.Queues = nil
			},
		},
		{
			name:   "pooler",
			modify: func(c *Config) { c.Database.Pooler = "statement" },
			want:   `database.pooler: must be none, session or transaction, got "statement"`,
		},
		{
			name:   "empty pooler",
			modify: func(c *Config) { c.Database.Pooler = "" },
			want:   `database.pooler: must be none, session or transaction, got ""`,
		},
		{
			name: "a transaction pooler with a direct URL",
			modify: func(c *Config) {
				c.Database.Pooler, c.Database.DirectURL = PoolerTransaction, "postgres://u:pw@primary/db"
			},
		},
		{
			name:   "driver",
			modify: func(c *Config) { c.Queue.Driver = "redis" },
			want:   `queue.driver: must be database or memory, got "redis"`,
		},
		{
			name:   "empty driver",
			modify: func(c *Config) { c.Queue.Driver = "" },
			want:   `queue.driver: must be database or memory, got ""`,
		},
		{
			name:   "level",
			modify: func(c *Config) { c.Log.Level = "INFO" },
			want:   `log.level: must be debug, info, warn or error, got "INFO"`,
		},
		{
			name:   "format",
			modify: func(c *Config) { c.Log.Format = "xml" },
			want:   `log.format: must be text or json, got "xml"`,
		},
		{
			name:   "timescale",
			modify: func(c *Config) { c.Fleet.Timescale = "on" },
			want:   `fleet.timescale: must be auto or off, got "on"`,
		},
		{
			name:   "workers",
			modify: func(c *Config) { c.Queue.Workers = 0 },
			want:   "queue.workers: must be at least 1, got 0",
		},
		{
			name:   "tries",
			modify: func(c *Config) { c.Queue.Tries = -1 },
			want:   "queue.tries: must be at least 1, got -1",
		},
		{
			name:   "backoff",
			modify: func(c *Config) { c.Queue.Backoff = []int{1, -5, 30} },
			want:   "queue.backoff[1]: must be at least 0, got -5",
		},
		{
			name:   "timeout",
			modify: func(c *Config) { c.Queue.TimeoutSecs = 0 },
			want:   "queue.timeout_secs: must be at least 1, got 0",
		},
		{
			name:   "timeout grace",
			modify: func(c *Config) { c.Queue.TimeoutGraceSecs = -1 },
			want:   "queue.timeout_grace_secs: must be at least 0, got -1",
		},
		{
			name:   "poll interval",
			modify: func(c *Config) { c.Queue.PollIntervalMs = 9 },
			want:   "queue.poll_interval_ms: must be at least 10, got 9",
		},
		{
			name:   "max payload bytes",
			modify: func(c *Config) { c.Queue.MaxPayloadBytes = 0 },
			want:   "queue.max_payload_bytes: must be at least 2, got 0",
		},
		{
			name:   "held warn",
			modify: func(c *Config) { c.Fleet.HeldWarnSecs = 0 },
			want:   "fleet.held_warn_secs: must be at least 1, got 0",
		},
		{
			name:   "payload budget bytes",
			modify: func(c *Config) { c.Queue.PayloadBudgetBytes = -1 },
			want:   "queue.payload_budget_bytes: must be at least 0, got -1",
		},
		{
			name:   "default queue",
			modify: func(c *Config) { c.Queue.DefaultQueue = "" },
			want:   "queue.default_queue: must not be empty",
		},
		{
			name:   "blank queue name",
			modify: func(c *Config) { c.Queue.Queues = []string{"default", " "} },
			want:   "queue.queues[1]: must not be empty",
		},
		{
			// A worker takes its queues as one comma-separated flag: such a
			// queue would never be worked.
			name:   "queue name with a comma",
			modify: func(c *Config) { c.Queue.DefaultQueue = "mail,sms" },
			want:   `queue.default_queue: "mail,sms" must not contain a comma: a worker's --queue is a comma-separated list`,
		},
		{
			name:   "queue name with a newline",
			modify: func(c *Config) { c.Queue.Queues = []string{"a\nb"} },
			want:   `queue.queues[0]: "a\nb" must not contain control characters (U+000A at byte 1)`,
		},
		{
			name:   "overlong queue name",
			modify: func(c *Config) { c.Queue.Queues = []string{"default", strings.Repeat("q", 201)} },
			want:   "queue.queues[1]: must be at most 200 bytes, got 201",
		},
		{
			name: "all problems, in key order",
			modify: func(c *Config) {
				c.Queue.Workers, c.Queue.Tries = 0, 0
				c.Log.Format = "yaml"
			},
			want: "queue.workers: must be at least 1, got 0\n" +
				"queue.tries: must be at least 1, got 0\n" +
				`log.format: must be text or json, got "yaml"`,
		},
		{
			name: "password never shown",
			modify: func(c *Config) {
				c.Database.URL = "postgres://u:hunter2@h/db"
				c.Log.Level = "hunter2"
			},
			want: `log.level: must be debug, info, warn or error, got "xxxxx"`,
		},
		{
			name: "direct URL's password never shown",
			modify: func(c *Config) {
				c.Database.DirectURL = "postgres://u:hunter3@primary/db"
				c.Database.Pooler = "hunter3"
			},
			want: `database.pooler: must be none, session or transaction, got "xxxxx"`,
		},
		{
			name: "supervisors are not checked here",
			modify: func(c *Config) {
				c.Fleet.Supervisors = map[string]SupervisorConfig{"x": {MaxProcesses: intPtr(-1), Balance: "bogus"}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.modify(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			wantError(t, err, tt.want)
		})
	}
}

func TestValidateNil(t *testing.T) {
	var c *Config
	if err := c.Validate(); err == nil {
		t.Fatal("Validate on nil Config: got no error")
	}
}

func TestValidateFleetSection(t *testing.T) {
	t.Parallel()
	c := Default()
	c.Fleet.MasterTTLSecs = 2
	c.Fleet.BeatIntervalMs = 1000
	c.Fleet.BalanceMaxShift = 0
	c.Fleet.LongWait = map[string]int{"mail": -1}
	err := c.Validate()
	for _, want := range []string{"fleet.beat_interval_ms: must be below half of fleet.master_ttl_secs (1000 ms ≥ 2 s / 2)", "fleet.balance_max_shift", "fleet.long_wait.mail"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
	d := Default()
	if err := d.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}
