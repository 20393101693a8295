package cmd

import (
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// VersionInfo is what `app version` prints.
type VersionInfo struct {
	// App is the application's version: App.Version when set, else the
	// main module's version from the build information ("(devel)" for a
	// build outside a module version, such as go run or go build in the
	// source tree).
	App string `json:"app"`
	// Revision and Modified are the VCS revision the binary was built
	// from and whether the work tree had changes (when the build recorded
	// them).
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Fleet is the version of the fleet module the app was built with.
	Fleet string `json:"fleet"`
	// Go is the Go version that built the binary.
	Go string `json:"go"`
}

// develVersion is what the build information says of a module built from
// its source tree.
const develVersion = "(devel)"

// fleetModule is fleet's module path, taken from this package's own path
// (".../cmd").
var fleetModule = strings.TrimSuffix(reflect.TypeFor[App]().PkgPath(), "/cmd")

// versionInfo reads the versions from appVersion (App.Version as the app
// set it, possibly empty) and the binary's build information.
func versionInfo(appVersion string) VersionInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return versionFrom(appVersion, bi)
}

// versionFrom is versionInfo on given build information (nil: none).
func versionFrom(appVersion string, bi *debug.BuildInfo) VersionInfo {
	v := VersionInfo{App: appVersion, Fleet: develVersion, Go: runtime.Version()}
	if bi == nil {
		if v.App == "" {
			v.App = develVersion
		}
		return v
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	if v.App == "" {
		v.App = moduleVersion(&bi.Main)
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if bi.Main.Path == fleetModule {
		v.Fleet = moduleVersion(&bi.Main)
	}
	for _, d := range bi.Deps {
		if d.Path == fleetModule {
			v.Fleet = moduleVersion(d)
		}
	}
	return v
}

// moduleVersion is m's version, or its replacement's; "(devel)" when
// there is none (a replacement by a directory).
func moduleVersion(m *debug.Module) string {
	if m.Replace != nil {
		m = m.Replace
	}
	if m.Version == "" {
		return develVersion
	}
	return m.Version
}

// String renders the versions for people, one per line.
func (v VersionInfo) String() string {
	app := v.App
	if v.Revision != "" {
		app += " (revision " + v.Revision
		if v.Modified {
			app += ", modified"
		}
		app += ")"
	}
	return fmt.Sprintf("app %s\nfleet %s\ngo %s\n", app, v.Fleet, v.Go)
}

// Short renders the versions on one line, as masters and hand-run workers
// report them in their membership rows: "1.4.0+abc1234 (fleet v0.3.0,
// go1.26.8)".
func (v VersionInfo) Short() string {
	app := v.App
	if v.Revision != "" {
		app += "+" + v.Revision[:min(len(v.Revision), 7)]
		if v.Modified {
			app += "-modified"
		}
	}
	return fmt.Sprintf("%s (fleet %s, %s)", app, v.Fleet, v.Go)
}

func (r *runner) versionCommand(v VersionInfo) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the app's version, fleet's version and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if asJSON {
				return printJSON(c.OutOrStdout(), v)
			}
			_, err := fmt.Fprint(c.OutOrStdout(), v.String())
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
