package config

import (
	"strings"
	"testing"
)

// MarshalChanges writes nothing for the defaults, and for a changed
// configuration only the keys that differ, in their tables; Load reads the
// file back into the same configuration.
func TestMarshalChanges(t *testing.T) {
	t.Parallel()
	def := Default()
	b, err := MarshalChanges(&def)
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		t.Fatalf("the defaults marshal to %q, want nothing", s)
	}

	cfg := Default()
	cfg.Database.URL = "postgres://app:pw@db:5432/app"
	cfg.Queue.PollIntervalMs = def.Queue.PollIntervalMs + 250
	one, three := 1, 3
	cfg.Fleet.Supervisors = map[string]SupervisorConfig{
		"mail": {Queues: []string{"mail"}, Balance: "off", MinProcesses: &one, MaxProcesses: &three, MaxJobs: 100},
	}
	b, err = MarshalChanges(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{"[database]", "url = 'postgres://app:pw@db:5432/app'", "[queue]", "poll_interval_ms = ", "mail", "max_jobs = 100"} {
		if !strings.Contains(text, want) {
			t.Errorf("the changes lack %q:\n%s", want, text)
		}
	}
	for _, unwanted := range []string{"[log]", "max_conns", "workers", "level"} {
		if strings.Contains(text, unwanted) {
			t.Errorf("the changes hold %q, which is the default:\n%s", unwanted, text)
		}
	}
	got := mustLoad(t, map[string]string{"config/app.toml": text})
	again, err := MarshalChanges(got)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != text || got.Database != cfg.Database || got.Queue.PollIntervalMs != cfg.Queue.PollIntervalMs ||
		*got.Fleet.Supervisors["mail"].MaxProcesses != 3 {
		t.Errorf("loaded back, the changes are\n%s\nwant\n%s", again, text)
	}
}
