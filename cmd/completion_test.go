package cmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The shell completes supervisor names for fleet:pause and fleet:continue,
// and queue names for every --queue, from the app's configuration alone.
func TestCompletionOfSupervisorsAndQueues(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "[queue]\nqueues = [\"default\"]\n" +
		"[fleet.supervisors.exports]\nqueues = [\"exports\", \"reports\"]\n" +
		"[fleet.supervisors.web]\nqueues = [\"default\", \"mail\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "config", "app.toml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fleet:pause", ""}, "exports\nweb\n:4"},
		{[]string{"fleet:continue", "w"}, "web\n:4"},
		{[]string{"fleet:pause", "web", ""}, ":4"},
		{[]string{"fleet:jobs", "--pending", "--queue", ""}, "default\nexports\nmail\nreports\n:4"},
		{[]string{"fleet:work", "--queue", "default,"}, "default,exports\ndefault,mail\ndefault,reports\n:4"},
		{[]string{"fleet:clear", "--queue", "ma"}, "mail\n:4"},
	} {
		r := run(t, dir, nil, append([]string{"__complete"}, c.args...)...)
		if r.code != 0 || strings.TrimSpace(r.stdout) != c.want {
			t.Errorf("complete %q: %+v, want %q", c.args, r, c.want)
		}
	}
}
