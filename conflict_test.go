package fleet_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoConflictMarkers fails on a merge that left its conflict markers in
// a source, doc, SQL or config file: Go files would not build, but docs,
// SQL fragments and TOML would pass every other test with them.
func TestNoConflictMarkers(t *testing.T) {
	texts := map[string]bool{".go": true, ".md": true, ".sql": true, ".toml": true, ".yml": true, ".yaml": true, ".html": true, ".js": true, ".css": true, ".sh": true, ".txt": true}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !texts[filepath.Ext(path)] {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.HasPrefix(line, "<<<<<<< ") || strings.HasPrefix(line, ">>>>>>> ") || line == "=======" && filepath.Ext(path) != ".md" {
				t.Errorf("%s:%d: a merge conflict marker: %q", path, n, line)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}
