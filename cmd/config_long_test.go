package cmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOverlongConfigValueIsCutAndNamed: a value of 50 MB in the
// environment or the config file makes a short error line that names the
// key, not a line of 50 MB.
func TestOverlongConfigValueIsCutAndNamed(t *testing.T) {
	t.Parallel()
	const size = 50 << 20
	down := "APP_DATABASE__URL=postgres://app:hunter2@127.0.0.1:1/app?connect_timeout=2" // never reached
	check := func(name string, r result, key string) {
		t.Helper()
		line := strings.TrimSpace(r.stderr)
		if r.code == 0 || len(line) > 2000 || !strings.Contains(line, key) || !strings.Contains(line, "bytes") ||
			strings.Count(line, "\n") != 0 || strings.Contains(line, "hunter2") {
			if len(line) > 2000 {
				line = line[:2000] + "..."
			}
			t.Errorf("%s: exit %d, stderr %d bytes: %s", name, r.code, len(r.stderr), line)
		}
	}
	for name, value := range map[string]string{
		"brace": strings.Repeat("x{", size/2),
		"plain": strings.Repeat("x", size),
	} {
		r := run(t, t.TempDir(), []string{down, "APP_FLEET__NAME=" + value}, "fleet")
		check("environment, "+name, r, "fleet.name")
	}
	r := run(t, t.TempDir(), []string{down, "APP_QUEUE__WORKERS=" + strings.Repeat("9", size)}, "fleet:work")
	check("environment, a number", r, "APP_QUEUE__WORKERS")

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	toml := "[fleet]\nname = \"" + strings.Repeat("a\\t", size/3) + "\"\n"
	if err := os.WriteFile(filepath.Join(dir, "config", "app.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	r = run(t, dir, []string{down}, "fleet")
	check("config file", r, "fleet.name")
}
