package config

import (
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/joho/godotenv"
)

func TestScanDotenvLines(t *testing.T) {
	const src = `# comment
A=1

  export B = "two
lines"   # comment
C: 'x'
D=
E="a\"b"#c
A=again
F='it\'s'
G=1 # not a quote: "
`
	got, err := scanDotenv([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"A": 9, "B": 4, "C": 6, "D": 7, "E": 8, "F": 10, "G": 11}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestReadDotenv(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".env")
	vars, err := readDotenv(path)
	if err != nil || vars != nil {
		t.Fatalf("missing file: got %v, %v; want nothing", vars, err)
	}
	writeFiles(t, dir, map[string]string{".env": "B=2\nA=1\nC=${A}x\nB=3\n"})
	vars, err = readDotenv(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []dotenvVar{
		{name: "A", value: "1", line: 2},
		{name: "C", value: "1x", line: 3},
		{name: "B", value: "3", line: 4},
	}
	if !reflect.DeepEqual(vars, want) {
		t.Errorf("got %+v, want %+v", vars, want)
	}
}

func TestReadDotenvDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{".env/x": ""})
	if _, err := readDotenv(filepath.Join(dir, ".env")); err == nil {
		t.Fatal("got no error for a directory")
	}
}

// FuzzDotenvScanner checks that whatever scanDotenv accepts, godotenv
// parses to the same variables, so that line numbers always match values.
func FuzzDotenvScanner(f *testing.F) {
	for _, s := range []string{
		"A=1\nB=2\n",
		"export A=\"x\ny\" # c\nB: 'z'\n",
		"A=\"a\\\"b\"\n",
		"# c\n\n  A = 1 # c\n",
		"A=\"x\"#c\nB=",
		"A=1\r\nB=2",
		"A.B=1",
		"A='\\''",
		"0=0\r0",
		"0=\r1=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		lines, err := scanDotenv([]byte(src))
		if err != nil {
			return
		}
		values, err := godotenv.Unmarshal(src)
		if err != nil {
			t.Fatalf("scanDotenv accepts %q, godotenv does not: %v", src, err)
		}
		got := slices.Sorted(maps.Keys(lines))
		want := slices.Sorted(maps.Keys(values))
		if !slices.Equal(got, want) {
			t.Fatalf("%q: scanDotenv finds %q, godotenv %q", src, got, want)
		}
	})
}
