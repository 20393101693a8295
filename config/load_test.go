package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

func TestLoadNothingConfiguredGivesDefault(t *testing.T) {
	cfg := mustLoad(t, nil)
	if want := Default(); !reflect.DeepEqual(*cfg, want) {
		t.Errorf("got %+v\nwant %+v", *cfg, want)
	}
}

func TestLoadPrecedence(t *testing.T) {
	const (
		file   = "[queue]\nworkers = 5\n[log]\nlevel = \"warn\"\n"
		dotenv = "APP_QUEUE__WORKERS=6\nAPP_LOG__LEVEL=error\n"
	)
	env := []string{"APP_QUEUE__WORKERS=7"}
	tests := []struct {
		name        string
		file        string
		dotenv      string
		env         []string
		wantWorkers int
		wantLevel   string
	}{
		{name: "default", wantWorkers: 4, wantLevel: "info"},
		{name: "file over default", file: file, wantWorkers: 5, wantLevel: "warn"},
		{name: "dotenv over default", dotenv: dotenv, wantWorkers: 6, wantLevel: "error"},
		{name: "env over default", env: env, wantWorkers: 7, wantLevel: "info"},
		{name: "dotenv over file", file: file, dotenv: dotenv, wantWorkers: 6, wantLevel: "error"},
		{name: "env over file", file: file, env: env, wantWorkers: 7, wantLevel: "warn"},
		{name: "env over dotenv", dotenv: dotenv, env: env, wantWorkers: 7, wantLevel: "error"},
		{name: "all four", file: file, dotenv: dotenv, env: env, wantWorkers: 7, wantLevel: "error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{}
			if tt.file != "" {
				files["config/app.toml"] = tt.file
			}
			if tt.dotenv != "" {
				files[".env"] = tt.dotenv
			}
			cfg := mustLoad(t, files, tt.env...)
			if cfg.Queue.Workers != tt.wantWorkers {
				t.Errorf("queue.workers = %d, want %d", cfg.Queue.Workers, tt.wantWorkers)
			}
			if cfg.Log.Level != tt.wantLevel {
				t.Errorf("log.level = %q, want %q", cfg.Log.Level, tt.wantLevel)
			}
			// Keys no source sets keep their default.
			if cfg.Queue.Tries != 3 || cfg.Fleet.Path != "/_fleet" {
				t.Errorf("unset keys changed: tries %d, path %q", cfg.Queue.Tries, cfg.Fleet.Path)
			}
		})
	}
}

// A .env variable that the real environment also sets is not even
// converted: the environment wins, as with godotenv.Load.
func TestLoadEnvShadowsBadDotenvValue(t *testing.T) {
	cfg := mustLoad(t, map[string]string{".env": "APP_QUEUE__WORKERS=many\n"}, "APP_QUEUE__WORKERS=9")
	if cfg.Queue.Workers != 9 {
		t.Errorf("queue.workers = %d, want 9", cfg.Queue.Workers)
	}
}

func TestLoadFullFile(t *testing.T) {
	cfg := mustLoad(t, map[string]string{"config/app.toml": readTestdata(t, "full.toml")})
	want := Config{
		Database: DatabaseConfig{
			URL:       "postgres://fleet:s3cr3t-pw@db.internal:5432/fleet?sslmode=require",
			MaxConns:  20,
			Pooler:    "transaction",
			DirectURL: "postgres://fleet:direct-pw@db-primary.internal:5432/fleet?sslmode=require",
		},
		Queue: QueueConfig{
			Driver:             "memory",
			DefaultQueue:       "mail",
			Queues:             []string{"mail", "default", "reports"},
			Workers:            8,
			Tries:              5,
			Backoff:            []int{2, 10},
			TimeoutSecs:        120,
			TimeoutGraceSecs:   10,
			PollIntervalMs:     250,
			PrefetchHoldMs:     400,
			MaxPayloadBytes:    65536,
			PayloadBudgetBytes: 16777216,
		},
		Log: LogConfig{Level: "debug", Format: "json", Redact: []string{"password", "card_number"}},
		Fleet: FleetConfig{
			Only: []string{"default"},
			Supervisors: map[string]SupervisorConfig{
				"default": {
					Queues:       []string{"default", "mail"},
					Balance:      "auto",
					MinProcesses: intPtr(1),
					MaxProcesses: intPtr(10),
					Concurrency:  intPtr(4),
					MaxJobs:      1000,
					MaxMemoryMB:  512,
					MaxTimeSecs:  3600,
					Tries:        intPtr(2),
					Backoff:      []int{5},
					TimeoutSecs:  intPtr(30),
				},
				"reports": {Queues: []string{"reports"}, MaxProcesses: intPtr(0)},
			},
			BalanceCooldownSecs:     5,
			BalanceMaxShift:         2,
			MasterTTLSecs:           20,
			BeatIntervalMs:          1000,
			OnStop:                  "leave",
			LingerSecs:              30,
			StartTimeoutSecs:        30,
			LongWait:                map[string]int{"mail": 60, "default": 120},
			LongWaitCooldownMinutes: 30,
			LongWaitWebhook:         "https://hooks.example.com/fleet",
			HeldWarnSecs:            300,
			Trim:                    TrimConfig{CompletedHours: 48, FailedDays: 14, MetricsDays: 60},
			Timescale:               "off",
			HTTP:                    HTTPConfig{Addr: ":9000"},
			Path:                    "/admin/fleet",
			Dashboard:               false,
		},
	}
	if !reflect.DeepEqual(*cfg, want) {
		t.Errorf("got  %+v\nwant %+v", *cfg, want)
	}
}

// A list in the file replaces the default list; it is not merged with it.
func TestLoadFileReplacesLists(t *testing.T) {
	cfg := mustLoad(t, map[string]string{"config/app.toml": "[queue]\nbackoff = [2]\nqueues = []\n"})
	if !reflect.DeepEqual(cfg.Queue.Backoff, []int{2}) {
		t.Errorf("queue.backoff = %v, want [2]", cfg.Queue.Backoff)
	}
	if len(cfg.Queue.Queues) != 0 {
		t.Errorf("queue.queues = %v, want []", cfg.Queue.Queues)
	}
}

// Load must not let one result share memory with Default or another load.
func TestLoadDoesNotAliasDefaults(t *testing.T) {
	cfg := mustLoad(t, nil)
	cfg.Queue.Backoff[0] = 99
	cfg.Log.Redact[0] = "changed"
	if d := Default(); d.Queue.Backoff[0] != 1 || d.Log.Redact[0] != "password" {
		t.Errorf("Default changed through a loaded Config: %+v", d)
	}
}

func TestLoadConfigPath(t *testing.T) {
	const (
		workers5 = "[queue]\nworkers = 5\n"
		workers6 = "[queue]\nworkers = 6\n"
		workers7 = "[queue]\nworkers = 7\n"
	)
	tests := []struct {
		name        string
		files       map[string]string
		path        string
		env         []string
		wantWorkers int
	}{
		{
			name:        "default path",
			files:       map[string]string{"config/app.toml": workers5},
			wantWorkers: 5,
		},
		{
			name:        "default path may be absent",
			wantWorkers: 4,
		},
		{
			name:        "explicit path relative to Dir",
			files:       map[string]string{"config/app.toml": workers5, "other.toml": workers6},
			path:        "other.toml",
			wantWorkers: 6,
		},
		{
			name:        "APP_CONFIG relative to Dir",
			files:       map[string]string{"config/app.toml": workers5, "conf/env.toml": workers7},
			env:         []string{"APP_CONFIG=conf/env.toml"},
			wantWorkers: 7,
		},
		{
			name:        "explicit path beats APP_CONFIG",
			files:       map[string]string{"other.toml": workers6, "conf/env.toml": workers7},
			path:        "other.toml",
			env:         []string{"APP_CONFIG=conf/env.toml"},
			wantWorkers: 6,
		},
		{
			name:        "empty APP_CONFIG means unset",
			files:       map[string]string{"config/app.toml": workers5},
			env:         []string{"APP_CONFIG="},
			wantWorkers: 5,
		},
		{
			name:        "APP_CONFIG from .env",
			files:       map[string]string{"config/app.toml": workers5, "conf/env.toml": workers7, ".env": "APP_CONFIG=conf/env.toml\n"},
			wantWorkers: 7,
		},
		{
			name:        "environment APP_CONFIG beats .env APP_CONFIG",
			files:       map[string]string{"other.toml": workers6, "conf/env.toml": workers7, ".env": "APP_CONFIG=conf/env.toml\n"},
			env:         []string{"APP_CONFIG=other.toml"},
			wantWorkers: 6,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			env := append([]string{}, tt.env...)
			cfg, err := Load(Options{Path: tt.path, Dir: dir, Environ: env})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Queue.Workers != tt.wantWorkers {
				t.Errorf("queue.workers = %d, want %d", cfg.Queue.Workers, tt.wantWorkers)
			}
		})
	}
}

func TestLoadAbsolutePath(t *testing.T) {
	abs, err := filepath.Abs(filepath.Join(testdata, "full.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(Options{Path: abs, Dir: t.TempDir(), Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Queue.Workers != 8 {
		t.Errorf("queue.workers = %d, want 8", cfg.Queue.Workers)
	}
}

func TestLoadMissingNamedFile(t *testing.T) {
	tests := []struct {
		name  string
		path  string
		env   []string
		files map[string]string
		want  string
	}{
		{
			name: "explicit",
			path: "nope.toml",
			want: "config file nope.toml: file does not exist",
		},
		{
			name: "explicit default path",
			path: "config/app.toml",
			want: "config file config/app.toml: file does not exist",
		},
		{
			name: "APP_CONFIG",
			env:  []string{"APP_CONFIG=conf/nope.toml"},
			want: "config file conf/nope.toml (named by APP_CONFIG): file does not exist",
		},
		{
			name:  ".env APP_CONFIG",
			files: map[string]string{".env": "APP_CONFIG=nope.toml\n"},
			want:  "config file nope.toml (named by .env APP_CONFIG): file does not exist",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			env := append([]string{}, tt.env...)
			_, err := Load(Options{Path: tt.path, Dir: dir, Environ: env})
			wantError(t, err, tt.want)
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("errors.Is(err, fs.ErrNotExist) = false")
			}
		})
	}
}

func TestLoadConfigFileIsADirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "config", "app.toml"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Load(Options{Dir: dir, Environ: []string{}})
	if err == nil || !strings.HasPrefix(err.Error(), "config file config/app.toml: ") {
		t.Fatalf("got %v, want a config file error", err)
	}
}

func TestLoadTOMLErrors(t *testing.T) {
	tests := []struct {
		name string
		toml string
		want string
	}{
		{
			name: "syntax error",
			toml: readTestdata(t, "syntax_error.toml"),
			want: "config/app.toml:3: unexpected character U+003D '=' at start of value",
		},
		{
			name: "missing value",
			toml: "[queue]\nworkers =\n",
			want: "config/app.toml:2: unexpected character U+000A at start of value",
		},
		{
			name: "duplicate key",
			toml: "[queue]\nworkers = 1\n\nworkers = 2\n",
			want: "config/app.toml:4: key workers is already defined",
		},
		{
			name: "unknown key",
			toml: readTestdata(t, "unknown_key.toml"),
			want: "config/app.toml:7: unknown key fleet.supervisors.default.max_proceses",
		},
		{
			name: "unknown table",
			toml: "[queue]\nworkers = 1\n\n[queu]\nworkers = 2\n",
			want: "config/app.toml:4: unknown key queu",
		},
		{
			name: "unknown dotted key",
			toml: "log.levle = \"info\"\n",
			want: "config/app.toml:1: unknown key log.levle",
		},
		{
			name: "several unknown keys",
			toml: "[queue]\nworkrs = 1\ntris = 2\n",
			want: "config/app.toml:2: unknown key queue.workrs\nconfig/app.toml:3: unknown key queue.tris",
		},
		{
			name: "quoted key",
			toml: "[fleet.supervisors.\"eu.west\"]\nmax_proceses = 1\n",
			want: "config/app.toml:2: unknown key fleet.supervisors.\"eu.west\".max_proceses",
		},
		{
			name: "string for integer",
			toml: readTestdata(t, "wrong_type.toml"),
			want: "config/app.toml:4: queue.workers: expected an integer, got a string",
		},
		{
			name: "float for integer",
			toml: "[queue]\ntries = 2.5\n",
			want: "config/app.toml:2: queue.tries: expected an integer, got a float",
		},
		{
			name: "string for boolean",
			toml: "[fleet]\n\ndashboard = \"yes\"\n",
			want: "config/app.toml:3: fleet.dashboard: expected a boolean, got a string",
		},
		{
			name: "date for string",
			toml: "[log]\nlevel = 2024-01-01\n",
			want: "config/app.toml:2: log.level: expected a string, got a date",
		},
		{
			name: "string for list",
			toml: "[queue]\nqueues = \"default,mail\"\n",
			want: "config/app.toml:2: queue.queues: expected a list of strings, got a string",
		},
		{
			name: "bad list element",
			toml: "[queue]\nbackoff = [\n  1,\n  \"5s\",\n]\n",
			want: "config/app.toml:4: queue.backoff: expected a list of integers, got a list containing a string",
		},
		{
			name: "array of tables for list of strings",
			toml: "[[queue.queues]]\nname = \"x\"\n",
			want: "config/app.toml:1: queue.queues: expected a list of strings, got a list containing a table",
		},
		{
			name: "integer for table",
			toml: "queue = 5\n",
			want: "config/app.toml:1: queue: expected a table, got an integer",
		},
		{
			name: "table for integer",
			toml: "[queue.workers]\nn = 1\n",
			want: "config/app.toml:1: queue.workers: expected an integer, got a table",
		},
		{
			name: "inline table for integer",
			toml: "queue.workers = { n = 1 }\n",
			want: "config/app.toml:1: queue.workers: expected an integer, got a table",
		},
		{
			name: "pointer field",
			toml: "[fleet.supervisors.default]\nqueues = [\"default\"]\nmax_processes = \"8\"\n",
			want: "config/app.toml:3: fleet.supervisors.default.max_processes: expected an integer, got a string",
		},
		{
			name: "map value",
			toml: "[fleet.long_wait]\nmail = 30\nreports = \"1h\"\n",
			want: "config/app.toml:3: fleet.long_wait.reports: expected an integer, got a string",
		},
		{
			name: "integer for supervisor table",
			toml: "[fleet.supervisors]\ndefault = 3\n",
			want: "config/app.toml:2: fleet.supervisors.default: expected a table, got an integer",
		},
		{
			name: "integer too large",
			toml: "[queue]\nworkers = 99999999999999999999\n",
			want: "config/app.toml:2: decimal number is too large to fit in a 64-bit signed integer",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadFiles(t, map[string]string{"config/app.toml": tt.toml})
			wantError(t, err, tt.want)
			var de *toml.DecodeError
			if !errors.As(err, &de) {
				t.Errorf("error does not wrap a *toml.DecodeError")
			}
		})
	}
}

// TOML errors show an explicit path as given.
func TestLoadTOMLErrorShowsPathAsGiven(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"etc/fleet.toml": "[queue]\nworkers = \"x\"\n"})
	for _, path := range []string{"etc/fleet.toml", filepath.Join(dir, "etc", "fleet.toml")} {
		_, err := Load(Options{Path: path, Dir: dir, Environ: []string{}})
		wantError(t, err, path+":2: queue.workers: expected an integer, got a string")
	}
	_, err := Load(Options{Dir: dir, Environ: []string{"APP_CONFIG=etc/fleet.toml"}})
	wantError(t, err, "etc/fleet.toml:2: queue.workers: expected an integer, got a string")
}

func TestLoadEnvOverrides(t *testing.T) {
	const file = `
[fleet.supervisors.default]
queues = ["default"]
max_processes = 4

[fleet.long_wait]
default = 60
`
	tests := []struct {
		name  string
		env   []string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "string",
			env:  []string{"APP_DATABASE__URL=postgres://u@h/db"},
			check: func(t *testing.T, c *Config) {
				if c.Database.URL != "postgres://u@h/db" {
					t.Errorf("database.url = %q", c.Database.URL)
				}
			},
		},
		{
			name: "pooler and direct URL",
			env:  []string{"APP_DATABASE__POOLER=session", "APP_DATABASE__DIRECT_URL=postgres://u@primary/db"},
			check: func(t *testing.T, c *Config) {
				if c.Database.Pooler != PoolerSession || c.Database.DirectURL != "postgres://u@primary/db" {
					t.Errorf("database.pooler = %q, database.direct_url = %q", c.Database.Pooler, c.Database.DirectURL)
				}
			},
		},
		{
			name: "string list",
			env:  []string{"APP_QUEUE__QUEUES=default,mail"},
			check: func(t *testing.T, c *Config) {
				if want := []string{"default", "mail"}; !reflect.DeepEqual(c.Queue.Queues, want) {
					t.Errorf("queue.queues = %q, want %q", c.Queue.Queues, want)
				}
			},
		},
		{
			name: "integer list with spaces",
			env:  []string{"APP_QUEUE__BACKOFF=1, 5 ,30"},
			check: func(t *testing.T, c *Config) {
				if want := []int{1, 5, 30}; !reflect.DeepEqual(c.Queue.Backoff, want) {
					t.Errorf("queue.backoff = %v, want %v", c.Queue.Backoff, want)
				}
			},
		},
		{
			name: "empty list",
			env:  []string{"APP_LOG__REDACT="},
			check: func(t *testing.T, c *Config) {
				if c.Log.Redact == nil || len(c.Log.Redact) != 0 {
					t.Errorf("log.redact = %#v, want empty", c.Log.Redact)
				}
			},
		},
		{
			name: "existing map entry keeps its other keys",
			env:  []string{"APP_FLEET__SUPERVISORS__DEFAULT__MAX_PROCESSES=16"},
			check: func(t *testing.T, c *Config) {
				s := c.Fleet.Supervisors["default"]
				if s.MaxProcesses == nil || *s.MaxProcesses != 16 {
					t.Errorf("max_processes = %v, want 16", s.MaxProcesses)
				}
				if !reflect.DeepEqual(s.Queues, []string{"default"}) {
					t.Errorf("queues = %q, want [default]", s.Queues)
				}
			},
		},
		{
			name: "new map entry",
			env: []string{
				"APP_FLEET__SUPERVISORS__MAIL__QUEUES=mail",
				"APP_FLEET__SUPERVISORS__MAIL__CONCURRENCY=2",
				"APP_FLEET__SUPERVISORS__MAIL__BACKOFF=3,9",
			},
			check: func(t *testing.T, c *Config) {
				want := SupervisorConfig{Queues: []string{"mail"}, Concurrency: intPtr(2), Backoff: []int{3, 9}}
				if got := c.Fleet.Supervisors["mail"]; !reflect.DeepEqual(got, want) {
					t.Errorf("supervisors[mail] = %+v, want %+v", got, want)
				}
				if len(c.Fleet.Supervisors) != 2 {
					t.Errorf("supervisors = %v, want default and mail", c.Fleet.Supervisors)
				}
			},
		},
		{
			name: "map of integers",
			env:  []string{"APP_FLEET__LONG_WAIT__MAIL=30", "APP_FLEET__LONG_WAIT__DEFAULT=90"},
			check: func(t *testing.T, c *Config) {
				if want := map[string]int{"mail": 30, "default": 90}; !reflect.DeepEqual(c.Fleet.LongWait, want) {
					t.Errorf("long_wait = %v, want %v", c.Fleet.LongWait, want)
				}
			},
		},
		{
			name: "pointer set to zero",
			env:  []string{"APP_FLEET__SUPERVISORS__DEFAULT__MIN_PROCESSES=0"},
			check: func(t *testing.T, c *Config) {
				if p := c.Fleet.Supervisors["default"].MinProcesses; p == nil || *p != 0 {
					t.Errorf("min_processes = %v, want pointer to 0", p)
				}
			},
		},
		{
			name: "nested struct",
			env:  []string{"APP_FLEET__TRIM__FAILED_DAYS=2", "APP_FLEET__HTTP__ADDR="},
			check: func(t *testing.T, c *Config) {
				if c.Fleet.Trim.FailedDays != 2 || c.Fleet.HTTP.Addr != "" {
					t.Errorf("trim = %+v, http = %+v", c.Fleet.Trim, c.Fleet.HTTP)
				}
			},
		},
		{
			name: "bool false",
			env:  []string{"APP_FLEET__DASHBOARD=false"},
			check: func(t *testing.T, c *Config) {
				if c.Fleet.Dashboard {
					t.Error("dashboard = true")
				}
			},
		},
		{
			name: "bool 0",
			env:  []string{"APP_FLEET__DASHBOARD=0"},
			check: func(t *testing.T, c *Config) {
				if c.Fleet.Dashboard {
					t.Error("dashboard = true")
				}
			},
		},
		{
			name: "negative integer",
			// A supervisor's rules are checked where supervisors resolve, so
			// the loaded value is the one written.
			env: []string{"APP_FLEET__SUPERVISORS__WORK__QUEUES=default", "APP_FLEET__SUPERVISORS__WORK__MIN_PROCESSES=-1"},
			check: func(t *testing.T, c *Config) {
				if p := c.Fleet.Supervisors["work"].MinProcesses; p == nil || *p != -1 {
					t.Errorf("min_processes = %v", p)
				}
			},
		},
		{
			name: "reserved and foreign variables are ignored",
			env:  []string{"APP_ENV=production", "HOME=/root", "APPLICATION=x", "app_queue__workers=x", "=C:=C:\\"},
			check: func(t *testing.T, c *Config) {
				if c.Queue.Workers != 4 {
					t.Errorf("queue.workers = %d", c.Queue.Workers)
				}
			},
		},
		{
			name: "later duplicate wins",
			env:  []string{"APP_QUEUE__WORKERS=2", "APP_QUEUE__WORKERS=3"},
			check: func(t *testing.T, c *Config) {
				if c.Queue.Workers != 3 {
					t.Errorf("queue.workers = %d, want 3", c.Queue.Workers)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, mustLoad(t, map[string]string{"config/app.toml": file}, tt.env...))
		})
	}
}

// Overrides of a map section create the map when the file has none.
func TestLoadEnvCreatesMaps(t *testing.T) {
	cfg := mustLoad(t, nil,
		"APP_FLEET__SUPERVISORS__DEFAULT__MAX_PROCESSES=16",
		"APP_FLEET__LONG_WAIT__MAIL=30",
	)
	if p := cfg.Fleet.Supervisors["default"].MaxProcesses; p == nil || *p != 16 {
		t.Errorf("supervisors[default].max_processes = %v, want 16", p)
	}
	if got := cfg.Fleet.LongWait["mail"]; got != 30 {
		t.Errorf("long_wait[mail] = %d, want 30", got)
	}
}

func TestLoadDotenvValues(t *testing.T) {
	const dotenv = `# comment
export APP_QUEUE__QUEUES="default, mail"
APP_LOG__FORMAT = json # trailing comment
APP_FLEET__LONG_WAIT_WEBHOOK='https://h.example/x?a=1#frag'
OTHER_TOOL=ignored
APP_FLEET__PATH: /yaml-style
APP_FLEET__HTTP__ADDR="multi
line"
`
	cfg := mustLoad(t, map[string]string{".env": dotenv})
	if want := []string{"default", "mail"}; !reflect.DeepEqual(cfg.Queue.Queues, want) {
		t.Errorf("queue.queues = %q, want %q", cfg.Queue.Queues, want)
	}
	if cfg.Log.Format != "json" {
		t.Errorf("log.format = %q", cfg.Log.Format)
	}
	if cfg.Fleet.LongWaitWebhook != "https://h.example/x?a=1#frag" {
		t.Errorf("long_wait_webhook = %q", cfg.Fleet.LongWaitWebhook)
	}
	if cfg.Fleet.Path != "/yaml-style" {
		t.Errorf("path = %q", cfg.Fleet.Path)
	}
	if cfg.Fleet.HTTP.Addr != "multi\nline" {
		t.Errorf("http.addr = %q", cfg.Fleet.HTTP.Addr)
	}
}

func TestLoadEnvErrors(t *testing.T) {
	tests := []struct {
		name   string
		dotenv string
		env    []string
		want   string
	}{
		{
			name: "unknown key",
			env:  []string{"APP_QUEUE__WORKRS=3"},
			want: "environment APP_QUEUE__WORKRS: unknown key queue.workrs",
		},
		{
			name: "key below a value",
			env:  []string{"APP_QUEUE__WORKERS__MAX=3"},
			want: "environment APP_QUEUE__WORKERS__MAX: unknown key queue.workers.max",
		},
		{
			name: "unknown key in map entry",
			env:  []string{"APP_FLEET__SUPERVISORS__DEFAULT__MAX_PROCESES=3"},
			want: "environment APP_FLEET__SUPERVISORS__DEFAULT__MAX_PROCESES: unknown key fleet.supervisors.default.max_proceses",
		},
		{
			name: "not an integer",
			env:  []string{"APP_QUEUE__WORKERS=many"},
			want: `environment APP_QUEUE__WORKERS: expected an integer, got "many"`,
		},
		{
			name: "integer out of range",
			env:  []string{"APP_QUEUE__WORKERS=99999999999999999999"},
			want: `environment APP_QUEUE__WORKERS: expected an integer, got "99999999999999999999"`,
		},
		{
			name: "not a pointer integer",
			env:  []string{"APP_FLEET__SUPERVISORS__DEFAULT__TRIES=two"},
			want: `environment APP_FLEET__SUPERVISORS__DEFAULT__TRIES: expected an integer, got "two"`,
		},
		{
			name: "not a boolean",
			env:  []string{"APP_FLEET__DASHBOARD=yes"},
			want: `environment APP_FLEET__DASHBOARD: expected a boolean, got "yes"`,
		},
		{
			name: "bad list item",
			env:  []string{"APP_QUEUE__BACKOFF=1,5s,30"},
			want: `environment APP_QUEUE__BACKOFF: expected a list of integers, got "1,5s,30"`,
		},
		{
			name: "bad map value",
			env:  []string{"APP_FLEET__LONG_WAIT__MAIL=1h"},
			want: `environment APP_FLEET__LONG_WAIT__MAIL: expected an integer, got "1h"`,
		},
		{
			name: "a whole section",
			env:  []string{"APP_QUEUE=1"},
			want: "environment APP_QUEUE: queue is a table: set one of its keys, as in APP_QUEUE__<KEY>",
		},
		{
			name: "whole table",
			env:  []string{"APP_FLEET__TRIM=1"},
			want: "environment APP_FLEET__TRIM: fleet.trim is a table: set one of its keys, as in APP_FLEET__TRIM__<KEY>",
		},
		{
			name: "whole map entry",
			env:  []string{"APP_FLEET__SUPERVISORS__DEFAULT=x"},
			want: "environment APP_FLEET__SUPERVISORS__DEFAULT: fleet.supervisors.default is a table: set one of its keys, as in APP_FLEET__SUPERVISORS__DEFAULT__<KEY>",
		},
		{
			name: "empty part",
			env:  []string{"APP_QUEUE____WORKERS=1"},
			want: `environment APP_QUEUE____WORKERS: malformed variable name: empty key part ("__" separates levels)`,
		},
		{
			name: "trailing separator",
			env:  []string{"APP_QUEUE__=1"},
			want: `environment APP_QUEUE__: malformed variable name: empty key part ("__" separates levels)`,
		},
		{
			name: "several errors, .env first then environment by name",
			env:  []string{"APP_LOG__Z=1", "APP_QUEUE__TRIES=x"},
			want: "environment APP_LOG__Z: unknown key log.z\nenvironment APP_QUEUE__TRIES: expected an integer, got \"x\"",
		},
		{
			name:   "unknown key in .env",
			dotenv: "# settings\n\nAPP_QUEUE__WORKRS=3\n",
			want:   ".env:3: APP_QUEUE__WORKRS: unknown key queue.workrs",
		},
		{
			name:   "bad value in .env",
			dotenv: "APP_LOG__LEVEL=debug\nexport APP_QUEUE__WORKERS=\"many\"\n",
			want:   `.env:2: APP_QUEUE__WORKERS: expected an integer, got "many"`,
		},
		{
			name:   "line of the last definition in .env",
			dotenv: "APP_QUEUE__WORKERS=1\nAPP_QUEUE__WORKERS=x\n",
			want:   `.env:2: APP_QUEUE__WORKERS: expected an integer, got "x"`,
		},
		{
			name:   "line after a multi-line value in .env",
			dotenv: "APP_FLEET__PATH=\"a\nb\nc\"\nAPP_QUEUE__TRIES=x\n",
			want:   `.env:4: APP_QUEUE__TRIES: expected an integer, got "x"`,
		},
		{
			name:   "both sources",
			dotenv: "APP_QUEUE__WORKRS=3\n",
			env:    []string{"APP_LOG__LEVL=info"},
			want:   ".env:1: APP_QUEUE__WORKRS: unknown key queue.workrs\nenvironment APP_LOG__LEVL: unknown key log.levl",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{}
			if tt.dotenv != "" {
				files[".env"] = tt.dotenv
			}
			_, err := loadFiles(t, files, tt.env...)
			wantError(t, err, tt.want)
		})
	}
}

func TestLoadDotenvMalformed(t *testing.T) {
	tests := []struct {
		name   string
		dotenv string
		want   string
	}{
		{
			name:   "no equals sign",
			dotenv: "APP_QUEUE__WORKERS=3\n\nAPP_LOG__LEVEL\n",
			want:   ".env:3: malformed line: expected NAME=VALUE",
		},
		{
			name:   "no equals sign at end of file",
			dotenv: "# c\njust some words",
			want:   ".env:2: malformed line: unexpected space in variable name",
		},
		{
			name:   "bad character in name",
			dotenv: "A=1\nAPP-QUEUE=3\n",
			want:   `.env:2: malformed line: unexpected character '-' in variable name`,
		},
		{
			name:   "missing name",
			dotenv: "A=1\n=3\n",
			want:   `.env:2: malformed line: missing variable name before '='`,
		},
		{
			name:   "unterminated double quote",
			dotenv: "A=1\nAPP_DATABASE__URL=\"postgres://u:s3cr3t-pw@h/db\nB=2\n",
			want:   ".env:2: malformed line: unterminated quoted value",
		},
		{
			name:   "unterminated single quote",
			dotenv: "A='x\\'\n",
			want:   ".env:1: malformed line: unterminated quoted value",
		},
		{
			name:   "text after closing quote",
			dotenv: "A=\"x\ny\" z\n",
			want:   ".env:2: malformed line: unexpected text after closing quote",
		},
		{
			name:   "CRLF line endings",
			dotenv: "A=1\r\nB=2\r\nbad line\r\n",
			want:   ".env:3: malformed line: unexpected space in variable name",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadFiles(t, map[string]string{".env": tt.dotenv})
			wantError(t, err, tt.want)
		})
	}
}

// No error message shows the database password, wherever it comes from and
// whatever goes wrong.
func TestLoadErrorsNeverShowPassword(t *testing.T) {
	const password = "s3cr3t-pw"
	const url = "postgres://fleet:" + password + "@db/fleet"
	tests := []struct {
		name  string
		files map[string]string
		env   []string
	}{
		{
			name:  "TOML syntax error on the URL line",
			files: map[string]string{"config/app.toml": "[database]\nurl = \"" + url + "\nmax_conns = 1\n"},
		},
		{
			name:  "TOML URL of the wrong type",
			files: map[string]string{"config/app.toml": "[database]\nurl = [\"" + url + "\"]\n"},
		},
		{
			name:  "URL in the wrong variable",
			files: map[string]string{"config/app.toml": "[database]\nurl = \"" + url + "\"\n"},
			env:   []string{"APP_DATABASE__MAX_CONNS=" + url},
		},
		{
			name: "keyword/value DSN in the wrong variable",
			env:  []string{"APP_QUEUE__WORKERS=host=db password=" + password},
		},
		{
			name: "bare password in the wrong variable",
			env:  []string{"APP_DATABASE__URL=" + url, "APP_QUEUE__TRIES=" + password},
		},
		{
			name:  "bare password from .env",
			files: map[string]string{".env": "APP_DATABASE__URL=" + url + "\nAPP_QUEUE__TRIES=" + password + "\n"},
		},
		{
			name:  "malformed .env",
			files: map[string]string{".env": "APP_DATABASE__URL=" + url + "\nAPP_X=\"" + password + "\n"},
		},
		{
			name:  "malformed .env name",
			files: map[string]string{".env": "APP_DATABASE__URL " + url + "\n"},
		},
		{
			name: "unknown key with a URL value",
			env:  []string{"APP_DATABASE__URI=" + url},
		},
		{
			name: "direct URL's password in the wrong variable",
			env:  []string{"APP_DATABASE__DIRECT_URL=" + url, "APP_QUEUE__TRIES=" + password},
		},
		{
			name:  "direct URL's password from the file, in a bad pooler",
			files: map[string]string{"config/app.toml": "[database]\ndirect_url = \"" + url + "\"\npooler = \"" + password + "\"\n"},
		},
		{
			name: "direct URL's password from the environment, in a bad pooler",
			env:  []string{"APP_DATABASE__DIRECT_URL=" + url, "APP_DATABASE__POOLER=" + password},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadFiles(t, tt.files, tt.env...)
			if err == nil {
				t.Fatal("got no error")
			}
			t.Log(err)
			if strings.Contains(err.Error(), password) {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

func TestLoadValidates(t *testing.T) {
	_, err := loadFiles(t, map[string]string{"config/app.toml": "[queue]\nworkers = 0\n"})
	wantError(t, err, "queue.workers: must be at least 1, got 0")

	_, err = loadFiles(t, nil, "APP_LOG__LEVEL=verbose", "APP_QUEUE__DRIVER=redis")
	wantError(t, err, "queue.driver: must be database or memory, got \"redis\"\n"+
		"log.level: must be debug, info, warn or error, got \"verbose\"")
}

// Dir "" is the working directory; Environ nil is the process environment.
func TestLoadZeroOptions(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"config/app.toml": "[queue]\nworkers = 5\n",
		".env":            "APP_QUEUE__TRIES=6\n",
	})
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "APP_") {
			t.Skipf("the process environment sets %s", kv)
		}
	}
	t.Chdir(dir)
	t.Setenv("APP_LOG__FORMAT", "json")
	cfg, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Queue.Workers != 5 || cfg.Queue.Tries != 6 || cfg.Log.Format != "json" {
		t.Errorf("workers %d, tries %d, format %q; want 5, 6, json",
			cfg.Queue.Workers, cfg.Queue.Tries, cfg.Log.Format)
	}
}

// FuzzDecodeTOML checks that any document either decodes or gives errors
// that start with "NAME:LINE: ", and never panics.
func FuzzDecodeTOML(f *testing.F) {
	for _, name := range []string{"full.toml", "syntax_error.toml", "wrong_type.toml", "unknown_key.toml"} {
		b, err := os.ReadFile(filepath.Join(testdata, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("[[fleet.supervisors]]\nx = 1\n"))
	f.Add([]byte("fleet.long_wait = [1]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Default()
		err := decodeTOML(&cfg, data, "app.toml")
		if err == nil {
			return
		}
		for line := range strings.SplitSeq(err.Error(), "\n") {
			var n int
			if _, scanErr := fmt.Sscanf(line, "app.toml:%d: ", &n); scanErr != nil || n < 1 {
				t.Fatalf("error line %q lacks app.toml:LINE", line)
			}
		}
	})
}
