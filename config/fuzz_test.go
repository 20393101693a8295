package config

import (
	"errors"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/joho/godotenv"
)

// FuzzLoad loads a configuration from a fuzzed .env file, config/app.toml
// and one environment variable, with database.url set (from the
// environment, the .env file or the TOML file) to a URL whose password is
// fuzzed too. Load must not panic or hang; every error it returns must
// name its source (file and line, variable, or key); and the password must
// not show: the error text is the same whatever the password is.
func FuzzLoad(f *testing.F) {
	type seed struct {
		dotenv, toml, name, value, password string
		where                               uint8
	}
	for _, s := range []seed{
		{"", "", "", "", "hunter2", 0},
		{"APP_QUEUE__WORKERS=8\n", "[queue]\ntries = 3\n", "APP_LOG__LEVEL", "debug", "hunter2", 0},
		{"# comment\nexport APP_LOG__FORMAT=json # trailing\nAPP_QUEUE__QUEUES=\"high, low\"\n", "", "", "", "s3cr3t-pw", 1},
		{"A=1\nB=2\nAPP_QUEUE__WORKERS='unterminated\n", "", "", "", "s3cr3t-pw", 1},
		{"APP_QUEUE__WORKERS=many\n", "", "", "", "s3cr3t-pw", 2},
		{"APP_QUEUE__WORKRS=1\n", "", "APP_QUEUE__WORKRS", "1", "s3cr3t-pw", 0},
		{"", "", "APP_", "x", "s3cr3t-pw", 0},
		{"", "", "APP_QUEUE____WORKERS", "1", "s3cr3t-pw", 0},
		{"", "", "APP_QUEUE", "1", "s3cr3t-pw", 0},
		{"", "", "APP_FLEET__SUPERVISORS__DEFAULT__MAX_PROCESSES", "16", "s3cr3t-pw", 0},
		{"", "", "APP_FLEET__LONG_WAIT__HIGH", "-1", "s3cr3t-pw", 0},
		{"", "", "APP_QUEUE__WORKERS", "99999999999999999999999", "s3cr3t-pw", 0},
		{"", "", "APP_QUEUE__BACKOFF", "1,x,3", "s3cr3t-pw", 0},
		{"", "", "APP_LOG__LEVEL", "s3cr3t-pw", "s3cr3t-pw", 0},
		{"APP_LOG__LEVEL=${APP_DATABASE__URL}\n", "", "", "", "s3cr3t-pw", 1},
		{"APP_LOG__LEVEL=x:${APP_DATABASE__URL}\n", "", "", "", "s3cr3t-pw", 1},
		{"", "[log]\nlevel = 'loud'\n", "APP_DATABASE__MAX_CONNS", "s3cr3t-pw", "s3cr3t-pw", 2},
		{"", "[queue]\nworkers = \"8\"\n[nope]\nx = 1\n", "", "", "p@ss:w/rd?#%", 2},
		{"", "[database]\nurl = 'postgres://u:other@h/db'\n", "", "", "p@ss:w/rd?#%", 2},
		{"", "= broken\n[[[", "", "", "пароль", 2},
		{"\r", "", "", "", "hunter2", 1},
		{"A=1\r\nB\n", "", "", "", "hunter2", 1},
		{"\x00=1\n", "\x00", "\x00", "\x00", "\x00pw\x00", 1},
		{"APP_QUEUE__WORKERS=\"a\\\"b\" junk\n", "", "", "", "xxxxx", 1},
		{"ÄPP=1\n", "", "APP_LOG__LEVEL\n", "x", "hunter2", 0},
		{strings.Repeat("A=1\n", 500) + "B C=2\n", "", "", "", "hunter2", 1},
		{"", strings.Repeat("[a]\n", 200), "", "", "hunter2", 2},
	} {
		f.Add(s.dotenv, s.toml, s.name, s.value, s.password, s.where)
	}
	f.Fuzz(func(t *testing.T, dotenv, tomlDoc, name, value, password string, where uint8) {
		if password == "" || len(dotenv)+len(tomlDoc)+len(name)+len(value) > 1<<14 {
			return
		}
		other := "Qz" + strings.Repeat("7", len(password))
		inputs := []string{dotenv, tomlDoc, name, value}
		for _, pw := range []string{password, other} {
			for _, in := range inputs {
				if strings.Contains(in, pw) || strings.Contains(in, url.UserPassword("", pw).String()[1:]) {
					return // the password is also written elsewhere, where it may show
				}
			}
		}
		err1 := loadWith(t, dotenv, tomlDoc, name, value, password, where%3)
		if err1 == nil {
			return
		}
		msg := err1.Error()
		for _, e := range leafErrors(err1) {
			if !identifies(e.Error()) {
				t.Errorf("error %q does not name the line, variable or key at fault (in %q)", e, msg)
			}
		}
		if len(password) >= 4 && strings.Contains(msg, password) {
			t.Fatalf("error shows the database password %q: %s", password, msg)
		}
		err2 := loadWith(t, dotenv, tomlDoc, name, value, other, where%3)
		if err2 == nil || err2.Error() != msg {
			t.Fatalf("the error depends on the database password:\n%q: %v\n%q: %v", password, err1, other, err2)
		}
	})
}

// loadWith writes the files, sets database.url to a URL with password
// (where: 0 environment, 1 .env, 2 TOML) and loads.
func loadWith(t *testing.T, dotenv, tomlDoc, name, value, password string, where uint8) error {
	dir := t.TempDir()
	dbURL := (&url.URL{Scheme: "postgres", User: url.UserPassword("fleet", password), Host: "db.example", Path: "/app"}).String()
	var environ []string
	switch where {
	case 0:
		environ = append(environ, "APP_DATABASE__URL="+dbURL)
	case 1:
		dotenv = "APP_DATABASE__URL='" + dbURL + "'\n" + dotenv
	case 2:
		tomlDoc = "database.url = \"" + dbURL + "\"\n" + tomlDoc
	}
	if name != "" {
		environ = append(environ, name+"="+value)
	}
	if dotenv != "" {
		if err := os.WriteFile(filepath.Join(dir, dotenvName), []byte(dotenv), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if tomlDoc != "" {
		path := filepath.Join(dir, filepath.FromSlash(DefaultPath))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(tomlDoc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := Load(Options{Dir: dir, Environ: environ})
	if err == nil && cfg == nil {
		t.Fatal("Load returned neither a Config nor an error")
	}
	return err
}

// leafErrors flattens errors.Join trees.
func leafErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	}
	return []error{err}
}

var (
	// atLine: a file and a line.
	atLineRE = regexp.MustCompile(`^(\.env|config/app\.toml):[1-9][0-9]*: `)
	// atKey: a key of the configuration.
	atKeyRE = regexp.MustCompile(`^(database|queue|log|fleet)\.[a-z_]`)
)

// identifies reports whether an error message starts by naming what is at
// fault: a file and line, an environment variable or a key.
func identifies(msg string) bool {
	return atLineRE.MatchString(msg) || strings.HasPrefix(msg, "environment APP_") || atKeyRE.MatchString(msg)
}

// FuzzScanDotenv checks the .env structure scanner against godotenv: it
// must not panic or hang, its errors must be ".env:LINE: malformed line:
// ..." with LINE a line of the file, and a file it accepts must be one
// godotenv parses, with the same variables (else Load would report
// ".env: cannot be parsed", which names no line).
func FuzzScanDotenv(f *testing.F) {
	for _, s := range []string{
		"",
		"\n\n",
		"A=1",
		"# only a comment",
		"export A=1\nexport\tB = two # comment\n",
		"A: colon\n",
		"A=\"multi\nline\"\nB='x'\n",
		"A=\"escaped \\\" quote\" # c\n",
		"A=\"unterminated\n",
		"A='x' trailing\n",
		"=1\n",
		"A B=1\n",
		"A\n",
		"exportA=1\n",
		"export =1\n",
		"A.B_c9=${A}\n",
		"A=1\r\nB=2\r\n",
		"A=1\rB=2\n",
		"Ä=1\n",
		"A=\x00\n",
		"\x00",
		"A=\"\\\"\n",
		"A=`backtick`\n",
		"A=\"x\"#c\nB=\"y\" \t# c\n",
		"A = 'a\\'b'\n",
		strings.Repeat("A=1\n", 100) + "B=\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		lines, err := scanDotenv(src)
		nLines := 1 + strings.Count(string(src), "\n")
		if err != nil {
			var se *sourceError
			if !errors.As(err, &se) {
				t.Fatalf("scanDotenv(%q): %T %v; want a *sourceError", src, err, err)
			}
			n, ok := strings.CutPrefix(se.where, dotenvName+":")
			line, convErr := strconv.Atoi(n)
			if !ok || convErr != nil || line < 1 || line > nLines {
				t.Fatalf("scanDotenv(%q): error %q names no line of the file", src, err)
			}
			if !strings.HasPrefix(se.msg, "malformed line: ") {
				t.Fatalf("scanDotenv(%q): error %q", src, err)
			}
			return
		}
		for name, line := range lines {
			if line < 1 || line > nLines {
				t.Fatalf("scanDotenv(%q): %s at line %d of %d", src, name, line, nLines)
			}
		}
		values, err := godotenv.UnmarshalBytes(src)
		if err != nil {
			t.Fatalf("scanDotenv accepts %q, godotenv does not: %v", src, err)
		}
		got, want := slices.Sorted(maps.Keys(lines)), slices.Sorted(maps.Keys(values))
		if !slices.Equal(got, want) {
			t.Fatalf("%q: scanDotenv finds %q, godotenv %q", src, got, want)
		}
	})
}
