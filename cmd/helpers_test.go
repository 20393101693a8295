package cmd_test

import "github.com/fleet-go/fleet/internal/apptest"

// The application as real processes (package apptest), under the short
// names the tests of this package use.
var (
	appJobs    = apptest.Jobs
	startApp   = apptest.Start
	children   = apptest.Children
	alive      = apptest.Alive
	eventually = apptest.Eventually
	fleetEnv   = apptest.FleetEnv
)
