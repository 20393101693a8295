package cmd_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fleet-go/fleet/cmd"
	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/queue"
)

// runStdin is run with stdin.
func runStdin(t *testing.T, dir string, env []string, stdin io.Reader, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := cmd.ExecuteContext(context.Background(), cmd.App{
		Jobs: queue.NewRegistry(), Args: args, Environ: env, Dir: dir, Stdin: stdin, Stdout: &out, Stderr: &errb,
	})
	return result{code, out.String(), errb.String()}
}

// jsonOfSize is a JSON object of exactly n bytes.
func jsonOfSize(n int) []byte {
	return []byte(`{"d":"` + strings.Repeat("x", n-8) + `"}`)
}

func TestDispatchPayloadFromFileAndStdin(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("mb.json", jsonOfSize(1_000_000)) // a 1 MB file: under the 1 MiB default
	write("mib.json", jsonOfSize(1<<20))    // exactly the limit
	write("over.json", jsonOfSize(1<<20+1))
	write("bad.json", []byte(`{"a":`))
	write("small.json", []byte(`{"to":"ann"}`))

	for _, args := range [][]string{{"--payload", "@mb.json"}, {"--payload", "@mib.json"}, {"--payload", "@" + filepath.Join(dir, "small.json")}} {
		if r := runStdin(t, dir, env, nil, append([]string{"dispatch", "--name", "x"}, args...)...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	if r := runStdin(t, dir, env, strings.NewReader(`{"from":"stdin"}`), "dispatch", "--name", "x", "--payload", "-", "--count", "2"); r.code != 0 {
		t.Fatalf("stdin: %+v", r)
	}
	if n := countJobs(t, url, `queue_jobs WHERE payload = '{"from":"stdin"}'`); n != 2 {
		t.Fatalf("%d jobs with the stdin payload, want 2", n)
	}
	if n := countJobs(t, url, `queue_jobs WHERE length(payload->>'d') = 1000000 - 8`); n != 1 {
		t.Fatalf("the 1 MB payload: %d jobs", n)
	}
	before := countJobs(t, url, "queue_jobs")

	bad := []struct {
		env   []string
		stdin io.Reader
		arg   string
		want  string
	}{
		{nil, nil, "@over.json", "--payload @over.json: the payload is larger than queue.max_payload_bytes (1048576 bytes)"},
		{nil, nil, "@bad.json", "--payload @bad.json is not valid JSON"},
		{nil, nil, "@nope.json", "--payload @nope.json: open"},
		{nil, nil, "@", "--payload @: name a file after @"},
		{nil, strings.NewReader(string(jsonOfSize(1<<20 + 1))), "-", "--payload - (stdin): the payload is larger than queue.max_payload_bytes"},
		{nil, strings.NewReader(""), "-", "--payload - (stdin) is not valid JSON"},
		{[]string{"APP_QUEUE__MAX_PAYLOAD_BYTES=10"}, nil, "@small.json", "larger than queue.max_payload_bytes (10 bytes)"},
		{[]string{"APP_QUEUE__MAX_PAYLOAD_BYTES=10"}, nil, `{"to":"bob!"}`, "--payload: the payload is larger than queue.max_payload_bytes (10 bytes)"},
	}
	for _, b := range bad {
		r := runStdin(t, dir, append(b.env, env...), b.stdin, "dispatch", "--name", "x", "--payload", b.arg)
		if r.code == 0 || !strings.Contains(r.stderr, b.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%q: %+v, want one line containing %q", b.arg, r, b.want)
		}
	}
	if n := countJobs(t, url, "queue_jobs"); n != before {
		t.Fatalf("%d jobs inserted by refused dispatches", n-before)
	}
}

// TestDispatchCountStreams: dispatch --count sends its copies in batches
// of at most 2 MiB of payloads (at least one copy, at most 1000), one
// INSERT each, so that it holds one batch at a time whatever the count:
// the rows of one INSERT share its command id in the transaction (cmin),
// so the database shows the batches. All of them commit together.
func TestDispatchCountStreams(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := dbEnv(url)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big.json"), jsonOfSize(600_000), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		queue, payload, count string
		// want is the size of each batch, in order.
		want []int
	}{
		// 2 MiB holds three payloads of 600 kB.
		{"big", "@big.json", "20", []int{3, 3, 3, 3, 3, 3, 2}},
		// Small payloads: 1000 a batch.
		{"small", `{"a":1}`, "2500", []int{1000, 1000, 500}},
	} {
		if r := runStdin(t, dir, env, nil, "dispatch", "--name", "x", "--queue", c.queue, "--payload", c.payload, "--count", c.count); r.code != 0 {
			t.Fatalf("dispatch --count %s to %s: %+v", c.count, c.queue, r)
		}
		var batches []int
		var xacts int
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(context.Background(), `SELECT count(DISTINCT xmin::text) FROM queue_jobs WHERE queue = $1`, c.queue).Scan(&xacts); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(context.Background(), `SELECT count(*) FROM queue_jobs
			WHERE queue = $1 GROUP BY cmin::text::int ORDER BY min(id)`, c.queue)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n int
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			batches = append(batches, n)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		conn.Close(context.Background())
		if !slices.Equal(batches, c.want) || xacts != 1 {
			t.Errorf("dispatch --count %s of %s: batches of %v in %d transactions, want %v in one", c.count, c.payload, batches, xacts, c.want)
		}
	}
}
