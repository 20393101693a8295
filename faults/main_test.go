package faults_test

import (
	"testing"

	"github.com/fleet-go/fleet/internal/apptest"
)

// The test binary is also the application whose processes the scenarios
// start.
func TestMain(m *testing.M) { apptest.Main(m) }

// faultScenario skips the test under -short: every test here is a fault
// scenario, minutes of real masters and workers in all.
func faultScenario(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("fault scenario (real masters and workers, minutes in all): runs without -short")
	}
}
