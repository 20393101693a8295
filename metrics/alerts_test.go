package metrics

import (
	"os"
	"os/exec"
	"testing"
)

// TestAlertRules checks alerts.yml with promtool (Debian package
// prometheus): the rules parse, and the cases of testdata/alerts_test.yml
// fire as expected. Without promtool it skips, unless FLEET_TEST_REQUIRE
// is "all".
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("FLEET_TEST_REQUIRE") == "all" {
			t.Fatal("promtool is required (FLEET_TEST_REQUIRE=all): install the prometheus package")
		}
		t.Skip("promtool not found (install the prometheus package to check the alert rules)")
	}
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "testdata/alerts_test.yml"},
	} {
		out, err := exec.CommandContext(t.Context(), promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
