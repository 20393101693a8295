package fleet_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// unitFile is the documented systemd unit; docs/operating.md points at it.
const unitFile = "docs/systemd/app-fleet.service"

// maxExposure is the highest overall exposure `systemd-analyze security`
// may give the unit (its scale goes from 0, safe, to 10, unsafe).
const maxExposure = 4.5

var exposureLine = regexp.MustCompile(`Overall exposure level for \S+: ([0-9]+(?:\.[0-9]+)?) `)

// TestSystemdUnit: the documented unit passes `systemd-analyze verify`
// and scores at most maxExposure in `systemd-analyze security --offline`.
// verify checks that ExecStart's program exists, so both run on a copy
// whose ExecStart names an executable the test creates; every other line
// is the documented one. Without systemd-analyze the test skips, unless
// FLEET_TEST_REQUIRE=all.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	checkUnitSettings(t, string(src))

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		msg := "systemd-analyze not found, the systemd unit is not checked (install systemd)"
		if os.Getenv("FLEET_TEST_REQUIRE") == "all" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	dir := t.TempDir()
	exe := filepath.Join(dir, "app")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	copied := strings.Replace(string(src), "\nExecStart=/srv/app/app ", "\nExecStart="+exe+" ", 1)
	if copied == string(src) {
		t.Fatalf("%s: no line starts with ExecStart=/srv/app/app", unitFile)
	}
	unit := filepath.Join(dir, filepath.Base(unitFile))
	if err := os.WriteFile(unit, []byte(copied), 0o644); err != nil {
		t.Fatal(err)
	}

	// verify exits 0 on some warnings (an unknown setting, for one), so
	// any output at all fails.
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}

	out, err = exec.Command(analyze, "security", "--offline=true", "--no-pager", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security --offline=true %s: %v\n%s", unitFile, err, out)
	}
	m := exposureLine.FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security printed no overall exposure level:\n%s", out)
	}
	score, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	if score > maxExposure {
		t.Fatalf("%s: exposure %.1f, want at most %.1f:\n%s", unitFile, score, maxExposure, out)
	}
	t.Logf("%s: exposure %.1f", unitFile, score)
}

// checkUnitSettings checks what the exposure score does not weigh: the
// database URL comes from the environment file, never from the unit, and
// the stop suits the master's (SIGTERM to it alone, then its children).
func checkUnitSettings(t *testing.T, src string) {
	t.Helper()
	settings := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("%s: %q is not a setting", unitFile, line)
			continue
		}
		settings[k] = append(settings[k], v)
		if strings.Contains(v, "postgres://") || strings.Contains(v, "postgresql://") {
			t.Errorf("%s: %s names a database URL; it belongs in the EnvironmentFile", unitFile, k)
		}
	}
	for k, want := range map[string]string{
		"KillMode":        "mixed",
		"DynamicUser":     "yes",
		"EnvironmentFile": "/etc/app-fleet/env",
		"Wants":           "network-online.target",
	} {
		if got := settings[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s: %s=%v, want %s", unitFile, k, got, want)
		}
	}
	if _, ok := settings["Environment"]; ok {
		t.Errorf("%s: Environment= is set; settings belong in the EnvironmentFile", unitFile)
	}
	if got := settings["After"]; len(got) != 1 || !strings.Contains(got[0], "network-online.target") {
		t.Errorf("%s: After=%v, want network-online.target in it", unitFile, got)
	}
}
