package spawner_test

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/spawner"
)

// FuzzParseLine feeds arbitrary lines to both parsers. Neither may panic;
// a line either parses or yields an error, and a line that parses formats
// back to a line that parses to the same value.
func FuzzParseLine(f *testing.F) {
	for _, seed := range []string{
		"",
		"@fleet ",
		"@fleet \n",
		"@fleet {}",
		"@fleet null",
		"fleet {\"v\":1,\"type\":\"ready\"}",
		"@fleet {\"v\":1,\"type\":\"ready\",\"pid\":42,\"worker\":\"host:42\",\"queues\":[\"high\",\"default\"],\"concurrency\":4,\"jobs\":0,\"running\":0,\"memory_mb\":0}\n",
		"@fleet {\"v\":1,\"type\":\"heartbeat\",\"jobs\":12,\"running\":3,\"memory_mb\":48.5,\"paused\":true}\r\n",
		"@fleet {\"v\":1,\"type\":\"exiting\",\"jobs\":100,\"running\":0,\"memory_mb\":1e3,\"reason\":\"max_jobs\",\"unsaved\":2}",
		"@fleet {\"v\":2,\"type\":\"ready\"}",
		"@fleet {\"v\":1,\"type\":\"reboot\"}",
		"@fleet {\"v\":1,\"type\":\"pause\"}",
		"@fleet {\"v\":1,\"type\":\"pause_queues\",\"queues\":[\"a\",\"b\"]}",
		"@fleet {\"v\":1,\"type\":\"stop\"} trailing",
		"@fleet {\"v\":1,\"type\":\"continue\"}{\"v\":2}",
		"@fleet {\"v\":99999999999999999999,\"type\":\"ready\"}",
		"@fleet {\"v\":1,\"type\":\"heartbeat\",\"jobs\":9223372036854775808}",
		"@fleet {\"v\":1,\"type\":\"heartbeat\",\"memory_mb\":1e400}",
		"@fleet {\"v\":1.5,\"type\":\"ready\"}",
		"@fleet {\"v\":1,\"type\":\"ready\",\"worker\":\"\\u00e9\\ud800\\u0000\"}",
		"@fleet {\"v\":1,\"type\":\"ready\",\"worker\":\"\xff\xfe\"}",
		"@fleet \x00{\"v\":1}",
		"@fleet [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
		"@fleet {\"v\":1,\"type\":\"ready\",\"queues\":" + strings.Repeat("[", 200) + strings.Repeat("]", 200) + "}",
		"@fleet {\"v\":1,\"type\":\"ready\",\"type\":\"pause\"}",
		"@fleet {\"V\":1,\"TYPE\":\"stop\"}",
		"@fleet \"@fleet \"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if r, err := spawner.ParseReport(line); err == nil {
			if !spawner.IsProtocolLine(line) {
				t.Fatalf("ParseReport(%q) accepted a line without the prefix", line)
			}
			again, err := spawner.ParseReport(string(spawner.FormatReport(r)))
			if err != nil {
				t.Fatalf("report %+v from %q: formatted line does not parse: %v", r, line, err)
			}
			if !reflect.DeepEqual(normReport(again), normReport(r)) {
				t.Fatalf("report round trip from %q:\n got %+v\nwant %+v", line, again, r)
			}
		} else if err.Error() == "" {
			t.Fatalf("ParseReport(%q): empty error", line)
		}
		if c, err := spawner.ParseCommand(line); err == nil {
			if !spawner.IsProtocolLine(line) {
				t.Fatalf("ParseCommand(%q) accepted a line without the prefix", line)
			}
			again, err := spawner.ParseCommand(string(spawner.FormatCommand(c)))
			if err != nil {
				t.Fatalf("command %+v from %q: formatted line does not parse: %v", c, line, err)
			}
			if !reflect.DeepEqual(normCommand(again), normCommand(c)) {
				t.Fatalf("command round trip from %q:\n got %+v\nwant %+v", line, again, c)
			}
		} else if err.Error() == "" {
			t.Fatalf("ParseCommand(%q): empty error", line)
		}
	})
}

// FuzzReportRoundTrip formats a report built from the fuzzer's values and
// parses it back: the result must be the report itself (with V set, and
// strings as JSON carries them), or an error when the type is unknown.
func FuzzReportRoundTrip(f *testing.F) {
	f.Add("ready", 42, "host:42", "high,default", 4, int64(0), 0, 0.0, false, "", 0)
	f.Add("heartbeat", 0, "", "", 0, int64(12), 3, 48.5, true, "", 0)
	f.Add("exiting", 0, "", "", 0, int64(100), 0, 1000.25, false, "max_jobs", 2)
	f.Add("exiting", -1, "wörker\x00\n", ",,", -8, int64(math.MaxInt64), math.MinInt, math.Copysign(0, -1), false, "crash", math.MaxInt)
	f.Add("ready", math.MaxInt, "\xff\xfe\xfd", "\xc3,\u2028,\"q\"", math.MaxInt, int64(math.MinInt64), 1, math.MaxFloat64, true, "\\u0000", -1)
	f.Add("exiting", 1, "w", "q", 1, int64(1), 1, math.SmallestNonzeroFloat64, false, "fenced", 0)
	f.Add("heartbeat", 0, "", "", 0, int64(0), 0, math.NaN(), false, "", 0)
	f.Add("heartbeat", 0, "", "", 0, int64(0), 0, math.Inf(1), false, "", 0)
	f.Add("unknown", 0, "", "", 0, int64(0), 0, 0.0, false, "", 0)
	f.Add("", 0, "", "", 0, int64(0), 0, 0.0, false, "", 0)
	f.Fuzz(func(t *testing.T, typ string, pid int, worker, queues string, concurrency int, jobs int64, running int, memoryMB float64, paused bool, reason string, unsaved int) {
		in := spawner.Report{
			Type: spawner.ReportType(typ), PID: pid, Worker: worker, Concurrency: concurrency,
			Jobs: jobs, Running: running, MemoryMB: memoryMB, Paused: paused,
			Reason: spawner.ExitReason(reason), Unsaved: unsaved,
		}
		if queues != "" {
			in.Queues = strings.Split(queues, ",")
		}
		line := spawner.FormatReport(in)
		if !strings.HasPrefix(string(line), spawner.LinePrefix) || !strings.HasSuffix(string(line), "\n") ||
			strings.Count(string(line), "\n") != 1 {
			t.Fatalf("FormatReport(%+v) = %q: not one protocol line", in, line)
		}
		got, err := spawner.ParseReport(string(line))
		switch in.Type {
		case spawner.ReportReady, spawner.ReportHeartbeat, spawner.ReportExiting:
			if err != nil {
				t.Fatalf("ParseReport(FormatReport(%+v)) = %q: %v", in, line, err)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), "unknown report type") {
				t.Fatalf("report of unknown type %q: got error %v", typ, err)
			}
			return
		}
		want := in
		want.V = spawner.ProtocolVersion
		want.Worker = jsonString(worker)
		want.Reason = spawner.ExitReason(jsonString(reason))
		for i, q := range want.Queues {
			want.Queues[i] = jsonString(q)
		}
		if math.IsNaN(memoryMB) || math.IsInf(memoryMB, 0) {
			want.MemoryMB = 0 // JSON has no such numbers: FormatReport sends 0
		}
		if !reflect.DeepEqual(normReport(got), normReport(want)) {
			t.Fatalf("round trip of %q:\n got %+v\nwant %+v", line, got, want)
		}
	})
}

// FuzzCommandRoundTrip is FuzzReportRoundTrip for master commands.
func FuzzCommandRoundTrip(f *testing.F) {
	f.Add("pause", "")
	f.Add("continue", "")
	f.Add("stop", "")
	f.Add("pause_queues", "high,low")
	f.Add("pause_queues", "")
	f.Add("pause_queues", ",\x00,\xff,\U0001F600")
	f.Add("Pause", "")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, typ, queues string) {
		in := spawner.Command{Type: spawner.CommandType(typ)}
		if queues != "" {
			in.Queues = strings.Split(queues, ",")
		}
		line := spawner.FormatCommand(in)
		if strings.Count(string(line), "\n") != 1 || !strings.HasSuffix(string(line), "\n") {
			t.Fatalf("FormatCommand(%+v) = %q: not one line", in, line)
		}
		got, err := spawner.ParseCommand(string(line))
		switch in.Type {
		case spawner.CommandPause, spawner.CommandContinue, spawner.CommandStop, spawner.CommandPauseQueues:
			if err != nil {
				t.Fatalf("ParseCommand(FormatCommand(%+v)) = %q: %v", in, line, err)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), "unknown command") {
				t.Fatalf("command of unknown type %q: got error %v", typ, err)
			}
			return
		}
		want := in
		want.V = spawner.ProtocolVersion
		for i, q := range want.Queues {
			want.Queues[i] = jsonString(q)
		}
		if !reflect.DeepEqual(normCommand(got), normCommand(want)) {
			t.Fatalf("round trip of %q:\n got %+v\nwant %+v", line, got, want)
		}
	})
}

// jsonString is s as encoding/json carries it: each byte of invalid UTF-8
// becomes U+FFFD.
func jsonString(s string) string { return string([]rune(s)) }

// normReport makes an empty queue list nil: omitempty drops both.
func normReport(r spawner.Report) spawner.Report {
	if len(r.Queues) == 0 {
		r.Queues = nil
	}
	return r
}

func normCommand(c spawner.Command) spawner.Command {
	if len(c.Queues) == 0 {
		c.Queues = nil
	}
	return c
}
