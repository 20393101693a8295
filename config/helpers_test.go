package config

import (
	"os"
	"path/filepath"
	"testing"
)

// testdata is the shared test data directory, relative to this package.
const testdata = "../testdata/config"

// writeFiles creates files (path relative to dir -> content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTestdata returns the content of a file of the testdata directory.
func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// loadFiles writes files into a fresh directory and loads the
// configuration from it with the given environment (never the process's).
func loadFiles(t *testing.T, files map[string]string, environ ...string) (*Config, error) {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	if environ == nil {
		environ = []string{}
	}
	return Load(Options{Dir: dir, Environ: environ})
}

// mustLoad is loadFiles that fails the test on error.
func mustLoad(t *testing.T, files map[string]string, environ ...string) *Config {
	t.Helper()
	cfg, err := loadFiles(t, files, environ...)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return cfg
}

// wantError fails the test unless err's message is exactly want.
func wantError(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %q", want)
	}
	if err.Error() != want {
		t.Fatalf("got error\n\t%q\nwant\n\t%q", err.Error(), want)
	}
}

func intPtr(n int) *int { return &n }
