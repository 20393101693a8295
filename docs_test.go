package fleet_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/config"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/supervisor"
)

// builtFiles are the Go files outside the module's packages that a test
// builds; a docs sample may be a copy of part of one of them.
var builtFiles = []string{
	"docs/embedding/main.go",        // TestEmbeddingGuide
	"fleettest/example_app_test.go", // the sample app's test, run by go test ./fleettest
	"fleettest/fleettest_test.go",   // its TestMain
}

// TestDocsGoSamples: every ```go block of README.md and docs/*.md is a
// copy of part of a file holding Example functions (which `go test`
// compiles, and runs when they have an Output comment) or of a file in
// builtFiles. Lines are compared trimmed, with runs of spaces folded to
// one (gofmt aligns trailing comments); blank lines and whole-line
// comments do not count.
func TestDocsGoSamples(t *testing.T) {
	t.Parallel()
	sources := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(src, []byte("\nfunc Example")) {
			sources[path] = sampleLines(string(src))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range builtFiles {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources[f] = sampleLines(string(src))
	}
	if len(sources) < 4 {
		t.Fatalf("found only %d example files", len(sources))
	}
	total := 0
	for _, doc := range docPages(t) {
		for _, s := range goSamples(t, doc) {
			total++
			lines := sampleLines(s.code)
			if len(lines) == 0 {
				t.Errorf("%s:%d: empty Go sample", doc, s.line)
				continue
			}
			found := false
			for _, src := range sources {
				if containsRun(src, lines) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s:%d: this Go sample is not a copy of an Example function or of a file a test builds (%s); "+
					"add it to an example_*_test.go file and copy it from there:\n%s",
					doc, s.line, strings.Join(builtFiles, ", "), s.code)
			}
		}
	}
	if total < 10 {
		t.Errorf("found only %d Go samples in the docs", total)
	}
}

// docPages are the markdown files whose Go samples the tests check.
func docPages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, docs...)
}

// TestDocsGoSamplesStandAlone: every ```go block of README.md and docs/*.md
// can be pasted and read on its own. It parses as a Go file, as
// declarations, or as the statements of a function body; and every name it
// uses is declared in the block, is one of Go's own (int, len, nil, ...),
// is a package used as one (the block's imports, the standard library's
// packages, this module's, and the packages and import names its files
// use), or is named in backticks in the paragraph just above the block
// ("Given `pool`, a *pgxpool.Pool, and `ctx`:").
func TestDocsGoSamplesStandAlone(t *testing.T) {
	t.Parallel()
	pkgs := knownPackages(t)
	total := 0
	for _, doc := range docPages(t) {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(src), "\n")
		for _, s := range goSamples(t, doc) {
			total++
			fset := token.NewFileSet()
			f, before, err := parseSample(fset, s.code)
			if err != nil {
				line := s.line + 1
				var list scanner.ErrorList
				if errors.As(err, &list) && len(list) > 0 {
					line = s.line + list[0].Pos.Line - before
					err = list[0]
				}
				t.Errorf("%s:%d: this Go sample does not parse as a file, as declarations or as statements: %v\n%s",
					doc, line, err, s.code)
				continue
			}
			named := backticked(paragraphAbove(lines, s.line))
			reported := map[string]bool{}
			for _, id := range freeNames(f, pkgs) {
				if named[id.Name] || reported[id.Name] {
					continue
				}
				reported[id.Name] = true
				t.Errorf("%s:%d: the Go sample uses %s, which it does not declare: name it in backticks in the paragraph just above the sample (\"Given `%s`, ...:\"), or declare it in the sample",
					doc, s.line+fset.Position(id.Pos()).Line-before, id.Name, id.Name)
			}
		}
	}
	if total < 10 {
		t.Errorf("found only %d Go samples in the docs", total)
	}
}

// TestSampleChecks: the checks of TestDocsGoSamplesStandAlone on samples
// made up for it.
func TestSampleChecks(t *testing.T) {
	t.Parallel()
	pkgs := map[string]bool{"queue": true, "log": true}
	cases := []struct {
		name, code, para string
		parses           bool
		free             string // the names left, comma-separated
	}{
		{"statements", "job := queue.NewJob(\"x\", nil)\n_ = job\n", "", true, ""},
		{"cut short", "if err := tx.Commit(); err != nil {\n", "", false, ""},
		{"declarations", "type T struct{ N int }\n\nfunc (T) JobName() string { return \"t\" }\n", "", true, ""},
		{"a file", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(strings.ToUpper(\"x\")) }\n", "", true, "strings"},
		{"free names", "res, err := client.Dispatch(ctx, queue.NewJob(\"x\", nil))\nlog.Println(res, err, len(p))\n", "", true, "client,ctx,p"},
		{"named above", "res, err := client.Dispatch(ctx, queue.NewJob(\"x\", nil))\n_, _ = res, err\n", "Given `client`, a *queue.Client, and `ctx`:", true, ""},
		{"a package used as a value", "f(queue)\n", "Given `f`:", true, "queue"},
		{"in a span with more", "client.Use(nil)\n", "Given `client.Use`:", true, "client"},
	}
	for _, c := range cases {
		fset := token.NewFileSet()
		f, _, err := parseSample(fset, c.code)
		if (err == nil) != c.parses {
			t.Errorf("%s: parse error %v, want parsed: %v", c.name, err, c.parses)
			continue
		}
		if err != nil {
			continue
		}
		named := backticked(c.para)
		var free []string
		for _, id := range freeNames(f, pkgs) {
			if !named[id.Name] && !slices.Contains(free, id.Name) {
				free = append(free, id.Name)
			}
		}
		if got := strings.Join(free, ","); got != c.free {
			t.Errorf("%s: free names %q, want %q", c.name, got, c.free)
		}
	}
	lines := strings.Split("# T\n\nSome text, given\n`pool`:\n\n```go\nx\n```\n\n```go\ny\n```\n", "\n")
	if got := paragraphAbove(lines, 6); got != "Some text, given `pool`:" {
		t.Errorf("the paragraph above the first sample is %q", got)
	}
	if got := paragraphAbove(lines, 10); got != "" {
		t.Errorf("the paragraph above the second sample is %q, want none", got)
	}
}

// parseSample parses code as a Go file when it has a package clause, else
// as declarations, else as the statements of a function body. It returns
// the file and how many lines it put before code. When none parses it
// returns the error of the form that got furthest into code.
func parseSample(fset *token.FileSet, code string) (f *ast.File, before int, err error) {
	if hasPackageClause(code) {
		f, err = parser.ParseFile(fset, "sample.go", code, parser.AllErrors)
		return f, 0, err
	}
	f, declErr := parser.ParseFile(fset, "sample.go", "package sample\n"+code, parser.AllErrors)
	if declErr == nil {
		return f, 1, nil
	}
	f, stmtErr := parser.ParseFile(fset, "sample.go", "package sample\nfunc _() {\n"+code+"\n}\n", parser.AllErrors)
	if stmtErr == nil {
		return f, 2, nil
	}
	if errLine(declErr)-1 > errLine(stmtErr)-2 {
		return nil, 1, declErr
	}
	return nil, 2, stmtErr
}

// hasPackageClause reports whether code's first line that is not blank or
// a comment is a package clause.
func hasPackageClause(code string) bool {
	for l := range strings.Lines(code) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return strings.HasPrefix(l, "package ")
	}
	return false
}

// errLine is the line of a parse error's first position (0: unknown).
func errLine(err error) int {
	var list scanner.ErrorList
	if errors.As(err, &list) && len(list) > 0 {
		return list[0].Pos.Line
	}
	return 0
}

// freeNames returns the identifiers f uses without declaring them, in
// order, leaving out Go's predeclared names and known package names used
// as packages (the X of a selector: pkg.Name).
func freeNames(f *ast.File, pkgs map[string]bool) []*ast.Ident {
	imported := map[string]bool{}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		imported[packageName(path)] = true
		if im.Name != nil {
			imported[im.Name.Name] = true
		}
	}
	selected := map[*ast.Ident]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				selected[id] = true
			}
		}
		return true
	})
	var out []*ast.Ident
	for _, id := range f.Unresolved {
		switch {
		case id.Name == "_" || types.Universe.Lookup(id.Name) != nil:
		case selected[id] && (imported[id.Name] || pkgs[id.Name]):
		default:
			out = append(out, id)
		}
	}
	return out
}

// knownPackages are the names a sample may use as packages without
// importing them: the standard library's packages, and every package (by
// its name and by the names it is imported under) that the module's Go
// files import, this module's own among them.
func knownPackages(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.Name}}", "std").Output()
	if err != nil {
		t.Fatalf("go list std: %v", err)
	}
	pkgs := map[string]bool{}
	for name := range strings.FieldsSeq(string(out)) {
		pkgs[name] = true
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			pkgs[packageName(p)] = true
			if im.Name != nil && im.Name.Name != "_" && im.Name.Name != "." {
				pkgs[im.Name.Name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// packageName is the name a package of that import path goes by unless
// renamed: its last element, or the one before a major version suffix
// (github.com/jackc/pgx/v5 is pgx).
func packageName(path string) string {
	parts := strings.Split(path, "/")
	name := parts[len(parts)-1]
	if len(parts) > 1 && len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		name = parts[len(parts)-2]
	}
	return name
}

// paragraphAbove is the paragraph just above the fence on line fence
// (1-based) of lines: the non-blank lines up to the blank line, fence or
// heading before them, after skipping the blank lines right above the
// fence. Two samples separated only by blank lines have no paragraph
// between them.
func paragraphAbove(lines []string, fence int) string {
	i := fence - 2 // the line above the fence, 0-based
	for i >= 0 && strings.TrimSpace(lines[i]) == "" {
		i--
	}
	var para []string
	for ; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "```") || strings.HasPrefix(l, "#") {
			break
		}
		para = append([]string{l}, para...)
	}
	return strings.Join(para, " ")
}

// backticked is the set of code spans of text (`pool` gives pool), each
// trimmed.
func backticked(text string) map[string]bool {
	out := map[string]bool{}
	parts := strings.Split(text, "`")
	for i := 1; i < len(parts); i += 2 {
		out[strings.TrimSpace(parts[i])] = true
	}
	return out
}

// sample is one ```go block of a markdown file.
type sample struct {
	line int // of the opening fence
	code string
}

// goSamples returns the ```go blocks of a markdown file, fenced at any
// indentation (a block inside a list item is indented).
func goSamples(t *testing.T, path string) []sample {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []sample
	var cur *sample
	var b strings.Builder
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case cur == nil && l == "```go":
			cur = &sample{line: n}
			b.Reset()
		case cur != nil && l == "```":
			cur.code = b.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			b.WriteString(sc.Text())
			b.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Errorf("%s:%d: Go sample not closed", path, cur.line)
	}
	return out
}

// sampleLines is s's lines, trimmed and with runs of spaces folded,
// without blank lines and whole-line comments.
func sampleLines(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		l = strings.Join(strings.Fields(l), " ")
		if l != "" && !strings.HasPrefix(l, "//") {
			out = append(out, l)
		}
	}
	return out
}

// containsRun reports whether run appears in lines as consecutive lines.
func containsRun(lines, run []string) bool {
	for i := 0; i+len(run) <= len(lines); i++ {
		if slices.Equal(lines[i:i+len(run)], run) {
			return true
		}
	}
	return false
}

// firstShBlockAfter returns the first ```sh block of doc after the line
// heading.
func firstShBlockAfter(t *testing.T, doc, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no heading %q", heading)
	}
	_, rest, ok = strings.Cut(rest, "\n```sh\n")
	if !ok {
		t.Fatalf("no sh block after %q", heading)
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("the sh block after %q is not closed", heading)
	}
	return block + "\n"
}

// TestConfigurationTable: docs/configuration.md's tables of keys list
// every key of config.Config, none that does not exist, each with the
// default the code applies. A default is written as TOML in backticks
// (`4`, `"info"`, `[1, 5, 30]`, `{}`), as the key it falls back to
// (`queue.workers`), or as `required` or `unset`.
func TestConfigurationTable(t *testing.T) {
	t.Parallel()
	want := map[string]string{}
	collectDefaults(want, "", reflect.ValueOf(config.Default()))

	// What applies to keys of NAME tables, which config.Default cannot
	// hold: supervisor.Resolve's defaults, the supervisor's fallbacks to
	// the [queue] section, and the periodic schedules' defaults.
	sup := "fleet.supervisors.NAME."
	for k, v := range map[string]string{
		"queues":               "required",
		"balance":              strconv.Quote(string(supervisor.DefaultBalance)),
		"min_processes":        strconv.Itoa(supervisor.DefaultMinProcesses),
		"max_processes":        strconv.Itoa(supervisor.DefaultMaxProcesses),
		"fleet_max_processes":  "unset",
		"concurrency":          "queue.workers",
		"tries":                "queue.tries",
		"backoff":              "queue.backoff",
		"timeout_secs":         "queue.timeout_secs",
		"payload_budget_bytes": "queue.payload_budget_bytes",
	} {
		checkKnown(t, want, sup+k)
		want[sup+k] = v
	}
	per := "fleet.periodic.NAME."
	for k, v := range map[string]string{
		"cron":         "required",
		"job":          "required",
		"queue":        "queue.default_queue",
		"payload":      `"{}"`,
		"timezone":     `"UTC"`,
		"catch_up":     `"none"`,
		"catch_up_max": strconv.Itoa(config.PeriodicCatchUpMaxDefault),
	} {
		checkKnown(t, want, per+k)
		want[per+k] = v
	}

	doc, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for n, l := range strings.Split(string(doc), "\n") {
		cells := strings.Split(l, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		key := strings.Trim(strings.TrimSpace(cells[1]), "`")
		if !strings.Contains(key, ".") || strings.ContainsAny(key, " /") {
			continue // a row of another table
		}
		def := strings.TrimSpace(cells[2])
		if !strings.HasPrefix(def, "`") || !strings.HasSuffix(def, "`") {
			t.Errorf("docs/configuration.md:%d: %s: the default %q is not in backticks", n+1, key, def)
			continue
		}
		if _, dup := got[key]; dup {
			t.Errorf("docs/configuration.md:%d: %s is listed twice", n+1, key)
		}
		got[key] = strings.Trim(def, "`")
		w, ok := want[key]
		switch {
		case !ok:
			t.Errorf("docs/configuration.md:%d: %s is not a configuration key", n+1, key)
		case got[key] != w:
			t.Errorf("docs/configuration.md:%d: %s: the table says the default is `%s`, the code says `%s`", n+1, key, got[key], w)
		}
	}
	for k, v := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("docs/configuration.md lacks the key %s (default `%s`)", k, v)
		}
	}
}

// checkKnown fails when key is not one collectDefaults found.
func checkKnown(t *testing.T, want map[string]string, key string) {
	t.Helper()
	if _, ok := want[key]; !ok {
		t.Errorf("the test names %s, which config.Config does not have", key)
	}
}

// collectDefaults records, for every key below v, its value written as
// TOML. A map of tables becomes prefix.NAME.KEY, with the zero value of
// its element as the defaults (overridden by the caller where the code
// applies others).
func collectDefaults(out map[string]string, prefix string, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		key := prefix + name
		fv := v.Field(i)
		switch {
		case f.Type.Kind() == reflect.Struct:
			collectDefaults(out, key+".", fv)
		case f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct:
			collectDefaults(out, key+".NAME.", reflect.New(f.Type.Elem()).Elem())
		default:
			out[key] = tomlValue(fv)
		}
	}
}

// tomlValue writes v as TOML: `4`, `"info"`, `[1, 5, 30]`, `{}`; a nil
// pointer is `unset`.
func tomlValue(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return "unset"
		}
		return tomlValue(v.Elem())
	case reflect.String:
		return strconv.Quote(v.String())
	case reflect.Map:
		return "{}"
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = tomlValue(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v.Interface())
}

// TestEmbeddingGuide builds docs/embedding/main.go as docs/embedding.md
// tells a newcomer to, in a module of its own, and runs the guide's
// commands against a fresh database.
//
// Step 1's commands (the first sh block after "## 1. A module") run as the
// guide gives them, in a directory beside a link "fleet" to this checkout,
// with the module proxy off: fleet is not published, and the guide must
// not need it to be. The build stays offline too: the module takes this
// checkout's go.sum, and `go build -mod=mod` adds the requirements
// main.go's imports need from the module graph already in the module
// cache. `go mod tidy`, the guide's step, also resolves the tests of every
// dependency, which may need the network: it runs when FLEET_DOCS_TIDY=1,
// and always under FLEET_TEST_REQUIRE=all (.ci/run).
func TestEmbeddingGuide(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the guide's application, tens of seconds: runs without -short")
	}
	t.Parallel()
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile("docs/embedding.md")
	if err != nil {
		t.Fatal(err)
	}
	step1 := firstShBlockAfter(t, string(guide), "## 1. A module")
	base := t.TempDir()
	if err := os.Symlink(root, filepath.Join(base, "fleet")); err != nil {
		t.Fatal(err)
	}
	goEnv := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	try := func(dir string, timeout time.Duration, env []string, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		c := exec.CommandContext(ctx, name, args...)
		c.Dir, c.Env = dir, env
		out, err := c.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	// Step 1, from the guide: it makes the directory shop and its go.mod.
	if _, err := try(base, time.Minute, append(goEnv, "GOPROXY=off"), "sh", "-e", "-c", step1); err != nil {
		t.Fatalf("docs/embedding.md, step 1:\n%s\n%v", step1, err)
	}
	dir := filepath.Join(base, "shop")
	src, err := os.ReadFile("docs/embedding/main.go")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"main.go": src, "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tidy := os.Getenv("FLEET_DOCS_TIDY") == "1" || os.Getenv("FLEET_TEST_REQUIRE") == "all"
	run := func(timeout time.Duration, env []string, name string, args ...string) string {
		t.Helper()
		out, err := try(dir, timeout, env, name, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if tidy {
		run(5*time.Minute, goEnv, "go", "mod", "tidy")
		run(5*time.Minute, goEnv, "go", "build", "-o", "app", ".")
	} else {
		// From the module cache alone when it holds what the build needs;
		// a fresh machine's may lack a module only other platforms use
		// (go test of the project itself never fetches those), which the
		// module proxy then gives.
		out, err := try(dir, 5*time.Minute, append(goEnv, "GOPROXY=off"), "go", "build", "-o", "app", ".")
		if err != nil && strings.Contains(out, "GOPROXY=off") {
			_, err = try(dir, 5*time.Minute, goEnv, "go", "build", "-o", "app", ".")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "github.com/fleet-go/fleet v0.0.0-00010101000000-000000000000"; !strings.Contains(string(gomod), want) {
		t.Errorf("the guide's module does not require %s, as the guide says it will:\n%s", want, gomod)
	}

	url := pgtest.URL(t)
	env := []string{"APP_DATABASE__URL=" + url, "APP_QUEUE__QUEUES=default,mail", "PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	app := filepath.Join(dir, "app")
	run(time.Minute, env, app, "migrate")
	if out := run(time.Minute, env, app, "setup"); !strings.Contains(out, "table orders ready") {
		t.Errorf("setup printed %q", out)
	}
	for _, args := range [][]string{{"place-order", "ann@example.com"}, {"place-order", "bob@example.com", "--sql"}} {
		if out := run(time.Minute, env, app, args...); !strings.Contains(out, "order placed, mail job") {
			t.Errorf("%v printed %q", args, out)
		}
	}
	out := run(time.Minute, env, app, "fleet:work", "--stop-when-empty")
	for _, to := range []string{"ann@example.com", "bob@example.com"} {
		if !strings.Contains(out, "mail sent") || !strings.Contains(out, to) {
			t.Errorf("fleet:work did not send the mail to %s:\n%s", to, out)
		}
	}
	if out := run(time.Minute, env, app, "fleet:jobs", "--completed"); strings.Count(out, "mail.send") != 2 {
		t.Errorf("fleet:jobs --completed shows no two mail.send attempts:\n%s", out)
	}
}
