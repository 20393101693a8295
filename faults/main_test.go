package faults_test

import (
	"testing"

	"github.com/fleet-go/fleet/internal/apptest"
)

// The test binary is also the application whose processes the scenarios
// start.
func TestMain(m *testing.M) { apptest.Main(m) }
