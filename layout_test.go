package fleet_test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// layout is which of the module's packages each package may import (its
// non-test files): the layering of the design, from the pure decisions at
// the bottom up to cmd, which nothing imports but the example application
// and the test harness that runs it as a process.
var layout = map[string][]string{
	"":                       {"config", "decide", "model", "periodic", "queue", "redact", "store", "supervisor"},
	"bench":                  {"config", "master", "metrics", "queue", "spawner", "store", "supervisor", "worker"},
	"balancer":               {"supervisor"},
	"cmd":                    nil, // anything
	"cmd/app":                {"", "cmd", "queue"},
	"config":                 {"internal/defaults", "internal/names"},
	"dashboard":              {"", "queue"},
	"decide":                 {"model"},
	"faults":                 {},
	"fleettest":              {"pgtest", "queue", "spawner", "store", "worker"},
	"internal/apptest":       {"cmd", "internal/testwait", "pgtest", "queue"},
	"internal/backoff":       {},
	"internal/defaults":      {},
	"internal/examplekit":    {"pgtest"},
	"internal/jobhook":       {},
	"internal/lifecycle":     {},
	"internal/pgbouncertest": {"internal/syncbuf"},
	"internal/names":         {},
	"internal/ratelog":       {},
	"internal/syncbuf":       {},
	"internal/testwait":      {},
	"master":                 {"balancer", "decide", "internal/backoff", "internal/defaults", "internal/lifecycle", "internal/ratelog", "membership", "model", "periodic", "spawner", "store", "supervisor"},
	"membership":             {"internal/backoff", "internal/defaults", "internal/lifecycle", "store"},
	"metrics":                {"store"},
	"migrations":             {},
	"model":                  {"supervisor"},
	"otelfleet":              {"queue", "redact"},
	"periodic":               {},
	"pgcluster":              {},
	"pgtest":                 {"migrations", "pgcluster"},
	"process":                {"", "config", "dashboard", "internal/lifecycle", "master", "metrics", "periodic", "queue", "spawner", "store", "supervisor", "worker"},
	"queue":                  {"internal/jobhook", "internal/names", "model", "periodic", "store"},
	"redact":                 {},
	"spawner":                {},
	"spawner/inprocess":      {"queue", "spawner", "store", "worker"},
	"spawner/spawnertest":    {"spawner"},
	"store":                  {"migrations", "model"},
	"supervisor":             {},
	"worker":                 {"internal/backoff", "internal/defaults", "internal/jobhook", "internal/lifecycle", "internal/ratelog", "membership", "queue", "redact", "spawner", "store"},
}

// TestPackageLayout fails on an import the layout does not allow, and on a
// package it does not know (add it to the table, with what it may import).
func TestPackageLayout(t *testing.T) {
	t.Parallel()
	const module = "github.com/fleet-go/fleet"
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		name := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		allowed, known := layout[name]
		if !known {
			t.Errorf("package %q is not in the layout table", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			if dep == "cmd" && name != "cmd/app" && name != "internal/apptest" {
				t.Errorf("%s imports cmd: nothing but the example application and its test harness may", p.ImportPath)
				continue
			}
			if allowed != nil && !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s, which the layout does not allow (it may import %v)", p.ImportPath, imp, allowed)
			}
		}
	}
	if seen < len(layout)/2 {
		t.Fatalf("go list listed %d packages; the table knows %d", seen, len(layout))
	}
}

// external maps module path prefixes outside the standard library to the
// one package that may depend on them, directly or through other packages
// (and the packages that import it): OpenTelemetry is otelfleet's alone,
// so fleet's core packages, and an app that does not trace, never build
// it; cobra is cmd's, so the processes (package process) are built
// without the command line.
var external = map[string]string{
	"go.opentelemetry.io/":   "otelfleet",
	"github.com/spf13/cobra": "cmd",
}

// TestLayoutExternalDeps fails when a package depends on a module that
// external keeps to another package.
func TestLayoutExternalDeps(t *testing.T) {
	t.Parallel()
	const module = "github.com/fleet-go/fleet"
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	owners := map[string]bool{}
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for prefix, owner := range external {
			uses := slices.ContainsFunc(p.Deps, func(d string) bool { return strings.HasPrefix(d, prefix) })
			switch {
			case uses && name == owner:
				owners[owner] = true
			case uses && slices.Contains(p.Deps, module+"/"+owner):
				// It builds on the owner, and so on what the owner uses.
			case uses:
				t.Errorf("%s depends on %s...: only %s may", p.ImportPath, prefix, owner)
			}
		}
	}
	for prefix, owner := range external {
		if !owners[owner] {
			t.Errorf("%s does not depend on %s...: the check looks at the wrong package", owner, prefix)
		}
	}
}

// operatorAPI are the packages of the operator API: the Service of the
// module root, the commands and the dashboard.
var operatorAPI = []string{"", "cmd", "dashboard"}

// TestLayoutRuntimeWithoutOperatorAPI fails when the runtime (the master,
// the worker, the spawners and the membership) depends on the operator
// API, directly or through other packages: the runtime and the API share
// the vocabulary of package model, and the API is built on the runtime,
// never the other way round.
func TestLayoutRuntimeWithoutOperatorAPI(t *testing.T) {
	t.Parallel()
	const module = "github.com/fleet-go/fleet"
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps", "./master", "./worker", "./spawner/...", "./membership", "./dashboard").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	runtime := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.ImportPath == module+"/dashboard" {
			// The dashboard is the API's: it must show up as depending
			// on the root, or the check below looks at the wrong names.
			if !slices.Contains(p.Deps, module) {
				t.Errorf("dashboard does not depend on %s: the check looks at the wrong package", module)
			}
			continue
		}
		runtime++
		for _, api := range operatorAPI {
			if dep := strings.TrimSuffix(module+"/"+api, "/"); slices.Contains(p.Deps, dep) {
				t.Errorf("%s depends on %s, the operator API", p.ImportPath, dep)
			}
		}
	}
	if runtime < 5 {
		t.Errorf("go list listed %d runtime packages, want master, worker, membership and the spawners", runtime)
	}
}

// TestLayoutCobraOnlyInCmd fails when a package other than the commands
// (cmd, and the example application built on them) imports cobra: the
// flags and the output are cmd's, what the commands run lives in the
// packages below it.
func TestLayoutCobraOnlyInCmd(t *testing.T) {
	t.Parallel()
	const module = "github.com/fleet-go/fleet"
	const cobra = "github.com/spf13/cobra"
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	cmdImports := false
	for dec.More() {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		uses := slices.Contains(p.Imports, cobra)
		if name == "cmd" || name == "cmd/app" {
			cmdImports = cmdImports || uses
			continue
		}
		if uses || slices.Contains(p.TestImports, cobra) || slices.Contains(p.XTestImports, cobra) {
			t.Errorf("%s imports %s: only cmd may", p.ImportPath, cobra)
		}
	}
	if !cmdImports {
		t.Errorf("cmd does not import %s: the check looks at the wrong path", cobra)
	}
}
