package config

import (
	"strings"
	"testing"
)

// TestLongValuesAreCutInErrors: an error about a value of megabytes shows
// its first bytes and its length, names the key, and stays short; a secret
// stays masked.
func TestLongValuesAreCutInErrors(t *testing.T) {
	huge := strings.Repeat("x{", 1<<20)
	cases := map[string]struct {
		files   map[string]string
		environ []string
		want    []string
	}{
		"long name": {nil, []string{"APP_FLEET__NAME=" + strings.Repeat("é", 1<<20)},
			[]string{"fleet.name: must be at most 200 bytes, got 2097152 bytes (\"éé", `"… (2097152 bytes))`}},
		"name with braces": {nil, []string{"APP_FLEET__NAME=" + huge[:150]},
			[]string{`fleet.name: must hold no tab, newline or brace, got "x{x{`}},
		"unknown key": {map[string]string{"config/app.toml": "[fleet]\n" + strings.Repeat("k", 1<<20) + " = 1\n"}, nil,
			[]string{"config/app.toml:2: unknown key fleet.kkkk", "(cut: 1048594 bytes in all)"}},
		"number": {nil, []string{"APP_QUEUE__WORKERS=" + strings.Repeat("9", 1<<20)},
			[]string{`environment APP_QUEUE__WORKERS: expected an integer, got "999`, `"… (1048576 bytes)`}},
		"choice": {nil, []string{"APP_LOG__FORMAT=" + strings.Repeat("j", 1<<20)},
			[]string{`log.format: must be`, `"… (1048576 bytes)`}},
	}
	for name, c := range cases {
		_, err := loadFiles(t, c.files, c.environ...)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		msg := err.Error()
		if len(msg) > 1500 {
			t.Errorf("%s: the error is %d bytes: %.300s...", name, len(msg), msg)
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q lacks %q", name, msg, w)
			}
		}
	}
	// A short value is quoted whole, as before.
	if got := clip("abc", 3); got != "abc" {
		t.Errorf("clip of a short string: %q", got)
	}
	// A cut never splits a character.
	if got := clip("ééé", 3); got != "é… (cut: 6 bytes in all)" {
		t.Errorf("clip across a character: %q", got)
	}
}
