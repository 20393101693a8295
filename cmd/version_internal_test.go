package cmd

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Path: "example.com/app", Version: "v1.4.0"},
		Deps: []*debug.Module{
			{Path: "github.com/spf13/cobra", Version: "v1.10.2"},
			{Path: fleetModule, Version: "v0.3.0"},
		},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}},
	}
	v := versionFrom("", bi)
	if v != (VersionInfo{App: "v1.4.0", Revision: "abc123", Modified: true, Fleet: "v0.3.0", Go: "go1.99.1"}) {
		t.Fatalf("from build info: %+v", v)
	}
	if s := v.String(); s != "app v1.4.0 (revision abc123, modified)\nfleet v0.3.0\ngo go1.99.1\n" {
		t.Fatalf("String = %q", s)
	}
	// App.Version wins; a fleet replaced by a directory is (devel).
	bi.Deps[1].Replace = &debug.Module{Path: "../fleet"}
	if v := versionFrom("2.0.0", bi); v.App != "2.0.0" || v.Fleet != "(devel)" {
		t.Fatalf("set and replaced: %+v", v)
	}
	// Fleet's own binary: the main module is fleet.
	if v := versionFrom("", &debug.BuildInfo{Main: debug.Module{Path: fleetModule, Version: "(devel)"}}); v.App != "(devel)" || v.Fleet != "(devel)" || !strings.HasPrefix(v.Go, "go") {
		t.Fatalf("fleet itself: %+v", v)
	}
	if v := versionFrom("", nil); v.App != "(devel)" || v.Fleet != "(devel)" {
		t.Fatalf("no build info: %+v", v)
	}
	if fleetModule != "github.com/fleet-go/fleet" {
		t.Fatalf("fleetModule = %q", fleetModule)
	}
}

func TestVersionShort(t *testing.T) {
	v := VersionInfo{App: "1.4.0", Revision: "abcdef0123456", Modified: true, Fleet: "v0.3.0", Go: "go1.26.8"}
	if got, want := v.Short(), "1.4.0+abcdef0-modified (fleet v0.3.0, go1.26.8)"; got != want {
		t.Errorf("Short() = %q, want %q", got, want)
	}
	if got, want := (VersionInfo{App: "(devel)", Fleet: "(devel)", Go: "go1.26.8"}).Short(), "(devel) (fleet (devel), go1.26.8)"; got != want {
		t.Errorf("Short() = %q, want %q", got, want)
	}
}
