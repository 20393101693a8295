package cmd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/cmd"
)

func TestVersionCommandAndFlag(t *testing.T) {
	t.Parallel()
	exec := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := cmd.ExecuteContext(context.Background(), cmd.App{Version: "1.2.3", Args: args, Environ: []string{}, Dir: t.TempDir(), Stdout: &out, Stderr: &errb})
		return code, out.String() + errb.String()
	}
	code, out := exec("version")
	if code != 0 || !strings.HasPrefix(out, "app 1.2.3\nfleet ") || !strings.Contains(out, "\ngo go1.") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, flag := exec("--version"); code != 0 || flag != out {
		t.Fatalf("--version: %d %q, want %q", code, flag, out)
	}
	code, out = exec("version", "--json")
	var v cmd.VersionInfo
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.App != "1.2.3" || v.Fleet == "" || !strings.HasPrefix(v.Go, "go") {
		t.Fatalf("version --json: %d %v %q", code, err, out)
	}
	// No database, no configuration needed.
	if r := run(t, t.TempDir(), []string{"APP_DATABASE__URL=postgres://x:hunter2@127.0.0.1:1/x"}, "version"); r.code != 0 || !strings.HasPrefix(r.stdout, "app ") {
		t.Fatalf("version without a database: %+v", r)
	}
}
