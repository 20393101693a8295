package cmd_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/cmd"
)

// FuzzDispatchArgs runs `dispatch` with fuzzed flag values, extra
// arguments and a payload file, without a database: every run must fail
// (on its arguments, or because database.url is not set) without panicking,
// with one line of error on stderr; only --help may succeed.
func FuzzDispatchArgs(f *testing.F) {
	type seed struct {
		name, queue, payload, count, tries, delay, timeout, backoff, extra string
		file                                                               []byte
	}
	for _, s := range []seed{
		{name: "demo.noop", payload: "{}", count: "1"},
		{name: "demo.noop", queue: "high", payload: `{"to":"ann@example.com","n":[1,2,3]}`, count: "3", tries: "5", delay: "30s", timeout: "5m", backoff: "1,5,30"},
		{name: "", payload: "{}", count: "1"},
		{name: " ", payload: "{}", count: "1"},
		{name: "a\x00b", payload: "{}", count: "1"},
		{name: "\xff\xfe", queue: "\xff", payload: "{}", count: "1"},
		{name: "naïve.日本", queue: "キュー", payload: `"ü"`, count: "1"},
		{name: strings.Repeat("n", 300), queue: strings.Repeat("q", 300), payload: "{}", count: "1"},
		{name: "demo.noop", queue: "", payload: "{}", count: "1"},
		{name: "demo.noop", payload: "{", count: "1"},
		{name: "demo.noop", payload: "", count: "1"},
		{name: "demo.noop", payload: "\x00", count: "1"},
		{name: "demo.noop", payload: strings.Repeat("[", 10001) + strings.Repeat("]", 10001), count: "1"},
		{name: "demo.noop", payload: `{"a":1} {"b":2}`, count: "1"},
		{name: "demo.noop", payload: "@job.json", count: "1", file: []byte(`{"from":"file"}`)},
		{name: "demo.noop", payload: "@job.json", count: "1", file: []byte("not json\n")},
		{name: "demo.noop", payload: "@job.json", count: "1", file: bytes.Repeat([]byte(" "), 2<<20)},
		{name: "demo.noop", payload: "@missing.json", count: "1"},
		{name: "demo.noop", payload: "@", count: "1"},
		{name: "demo.noop", payload: "@.", count: "1"},
		{name: "demo.noop", payload: "-", count: "1", file: []byte(`{"from":"stdin"}`)},
		{name: "demo.noop", payload: "-", count: "1", file: []byte("{\n")},
		{name: "demo.noop", payload: "{}", count: "0"},
		{name: "demo.noop", payload: "{}", count: "-1"},
		{name: "demo.noop", payload: "{}", count: "99999999999999999999"},
		{name: "demo.noop", payload: "{}", count: "1e3"},
		{name: "demo.noop", payload: "{}", count: "1", tries: "0"},
		{name: "demo.noop", payload: "{}", count: "1", tries: "-3"},
		{name: "demo.noop", payload: "{}", count: "1", delay: "-1s"},
		{name: "demo.noop", payload: "{}", count: "1", delay: "1"},
		{name: "demo.noop", payload: "{}", count: "1", delay: "9999999999h"},
		{name: "demo.noop", payload: "{}", count: "1", timeout: "-5m"},
		{name: "demo.noop", payload: "{}", count: "1", timeout: "1µs"},
		{name: "demo.noop", payload: "{}", count: "1", backoff: "1,,3"},
		{name: "demo.noop", payload: "{}", count: "1", backoff: "-1"},
		{name: "demo.noop", payload: "{}", count: "1", backoff: " , "},
		{name: "demo.noop", payload: "{}", count: "1", backoff: "99999999999999999999"},
		{name: "demo.noop", payload: "{}", count: "1", extra: "positional"},
		{name: "demo.noop", payload: "{}", count: "1", extra: "--nope"},
		{name: "demo.noop", payload: "{}", count: "1", extra: "--json\x1f--name\x1f"},
		{name: "demo.noop", payload: "{}", count: "1", extra: "--count"},
		{name: "demo.noop", payload: "{}", count: "1", extra: "--help"},
		{name: "demo.noop", payload: "{}", count: "1", extra: "--"},
		{name: "demo.noop", payload: "{}", count: "1", extra: "-\n-"},
	} {
		f.Add(s.name, s.queue, s.payload, s.count, s.tries, s.delay, s.timeout, s.backoff, s.extra, s.file)
	}
	f.Fuzz(func(t *testing.T, name, queue, payload, count, tries, delay, timeout, backoff, extra string, file []byte) {
		args := []string{"dispatch", "--name", name, "--payload", payload, "--count", count}
		for _, fl := range []struct{ flag, value string }{
			{"--queue", queue}, {"--tries", tries}, {"--delay", delay}, {"--timeout", timeout}, {"--backoff", backoff},
		} {
			if fl.value != "" {
				args = append(args, fl.flag, fl.value)
			}
		}
		if extra != "" {
			args = append(args, strings.Split(extra, "\x1f")...)
		}
		for _, a := range args {
			// No other configuration (it could name a database to
			// connect to), and nothing that could block on a device.
			if strings.Contains(a, "config") || strings.Contains(a, "/dev") || strings.Contains(a, "/proc") ||
				strings.Contains(a, "/sys") || strings.Contains(a, "..") {
				return
			}
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "job.json"), file, 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := cmd.ExecuteContext(context.Background(), cmd.App{
			Args: args, Environ: []string{}, Dir: dir,
			Stdin: bytes.NewReader(file), Stdout: &stdout, Stderr: &stderr,
		})
		errText := stderr.String()
		if code == 0 {
			if !strings.Contains(stdout.String(), "Usage:") {
				t.Fatalf("%q: exit 0 without a database; stdout %q, stderr %q", args, stdout.String(), errText)
			}
			return
		}
		if !strings.HasPrefix(errText, "error: ") || !strings.HasSuffix(errText, "\n") || strings.Count(errText, "\n") != 1 {
			t.Fatalf("%q: exit %d; stderr is not one error line: %q", args, code, errText)
		}
		if strings.TrimSpace(strings.TrimPrefix(errText, "error: ")) == "" {
			t.Fatalf("%q: exit %d with an empty error", args, code)
		}
		if stdout.Len() != 0 {
			t.Fatalf("%q: exit %d; stdout %q", args, code, stdout.String())
		}
	})
}
