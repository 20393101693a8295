package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestLoadQueueLimits(t *testing.T) {
	cfg := mustLoad(t, map[string]string{"config/app.toml": "[queue.limits]\n\"exports.*\" = 2\n\"mail.send\" = 10\n"})
	if want := map[string]int{"exports.*": 2, "mail.send": 10}; !reflect.DeepEqual(cfg.Queue.Limits, want) {
		t.Fatalf("queue.limits = %v, want %v", cfg.Queue.Limits, want)
	}
}

func TestLoadQueueLimitsErrors(t *testing.T) {
	for _, tt := range []struct{ toml, want string }{
		{"[queue.limits]\n\"exports.*\" = 0\n", `queue.limits."exports.*": must be at least 1, got 0`},
		{"[queue.limits]\n\"exports.[\" = 2\n", `queue.limits."exports.[": must be a job-name pattern such as "exports.*" (* any run of characters but /, ? one character, [a-z] a class), got "exports.["`},
		{"[queue.limits]\n\" \" = 2\n", `queue.limits." ": must be a job-name pattern such as "exports.*" (* any run of characters but /, ? one character, [a-z] a class), got " "`},
		{"[queue.limits]\n\"" + strings.Repeat("x", MaxLimitPatternBytes+1) + "\" = 2\n", `the pattern must be at most 195 bytes, got 196`},
	} {
		_, err := loadFiles(t, map[string]string{"config/app.toml": tt.toml})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want an error containing %q", tt.toml, err, tt.want)
		}
	}
}
