package spawner

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Benchmarks of the @fleet protocol. A worker formats a heartbeat about
// every second and its master parses it, so these are the per-child costs
// of the protocol; the ready and exiting reports are sent once per process.
// Each benchmark checks the result of its last iteration, so a broken one
// fails instead of measuring nothing.

// benchHeartbeat is a heartbeat of a busy worker.
var benchHeartbeat = Report{Type: ReportHeartbeat, Jobs: 184_223, Running: 7, MemoryMB: 312.75}

// benchReady is the ready report of a worker of several queues.
var benchReady = Report{
	Type:        ReportReady,
	PID:         48_213,
	Worker:      "web-3.example.internal:48213:7f3a9c2e",
	Queues:      []string{"critical", "default", "mailers", "exports", "low"},
	Concurrency: 10,
}

// benchExiting is the exiting report of a worker at its memory limit.
var benchExiting = Report{Type: ReportExiting, Jobs: 52_000, Running: 0, MemoryMB: 1024.5, Reason: ExitMaxMemory}

func BenchmarkFormatReport(b *testing.B) {
	for _, bc := range []struct {
		name string
		r    Report
	}{
		{"heartbeat", benchHeartbeat},
		{"ready", benchReady},
		{"exiting", benchExiting},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var line []byte
			for b.Loop() {
				line = FormatReport(bc.r)
			}
			got, err := ParseReport(string(line))
			want := bc.r
			want.V = ProtocolVersion
			if err != nil || !reportsEqual(got, want) || !bytes.HasSuffix(line, []byte("}\n")) {
				b.Fatalf("FormatReport gave %q: parsed as %+v, %v; want %+v", line, got, err, want)
			}
		})
	}
}

func BenchmarkFormatCommand(b *testing.B) {
	for _, bc := range []struct {
		name string
		c    Command
	}{
		{"stop", Command{Type: CommandStop}},
		{"pause_queues", Command{Type: CommandPauseQueues, Queues: []string{"mailers", "exports"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var line []byte
			for b.Loop() {
				line = FormatCommand(bc.c)
			}
			got, err := ParseCommand(string(line))
			if err != nil || got.Type != bc.c.Type || !slices.Equal(got.Queues, bc.c.Queues) {
				b.Fatalf("FormatCommand gave %q: parsed as %+v, %v", line, got, err)
			}
		})
	}
}

func BenchmarkParseReport(b *testing.B) {
	for _, bc := range []struct {
		name string
		r    Report
	}{
		{"heartbeat", benchHeartbeat},
		{"ready", benchReady},
		{"exiting", benchExiting},
	} {
		b.Run(bc.name, func(b *testing.B) {
			line := string(FormatReport(bc.r))
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			var (
				got Report
				err error
			)
			for b.Loop() {
				got, err = ParseReport(line)
			}
			want := bc.r
			want.V = ProtocolVersion
			if err != nil || !reportsEqual(got, want) {
				b.Fatalf("ParseReport(%q) = %+v, %v; want %+v", line, got, err, want)
			}
		})
	}
}

func BenchmarkParseCommand(b *testing.B) {
	for _, bc := range []struct {
		name string
		c    Command
	}{
		{"stop", Command{Type: CommandStop}},
		{"pause_queues", Command{Type: CommandPauseQueues, Queues: []string{"mailers", "exports"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// What bufio.Scanner hands the worker: the line without "\n".
			line := strings.TrimSuffix(string(FormatCommand(bc.c)), "\n")
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			var (
				got Command
				err error
			)
			for b.Loop() {
				got, err = ParseCommand(line)
			}
			if err != nil || got.V != ProtocolVersion || got.Type != bc.c.Type || !slices.Equal(got.Queues, bc.c.Queues) {
				b.Fatalf("ParseCommand(%q) = %+v, %v; want %+v", line, got, err, bc.c)
			}
		})
	}
}

// BenchmarkLineWriter measures splitting a worker's output into lines and
// telling @fleet lines from others (without the parsing, measured above):
// what a master does with a report pipe's lines, and more than it does
// with output, which it forwards without looking.
func BenchmarkLineWriter(b *testing.B) {
	heartbeat := FormatReport(benchHeartbeat)
	logLine := []byte(`time=2025-03-14T09:26:53.589Z level=INFO msg="job done" queue=mailers job=184223 took=41ms` + "\n")
	var mixed []byte
	for range 4 {
		mixed = append(mixed, logLine...)
	}
	mixed = append(mixed, heartbeat...)
	for range 3 {
		mixed = append(append(mixed, logLine[:len(logLine)-1]...), '\r', '\n')
	}
	// The heartbeat split across writes, as a pipe read may deliver it.
	cut := len(heartbeat) / 2
	for _, bc := range []struct {
		name        string
		writes      [][]byte
		wantReports int
		wantOutput  int
	}{
		{"heartbeat", [][]byte{heartbeat}, 1, 0},
		{"heartbeat_split", [][]byte{heartbeat[:cut], heartbeat[cut:]}, 1, 0},
		{"mixed_8_lines", [][]byte{mixed}, 1, 7},
	} {
		b.Run(bc.name, func(b *testing.B) {
			size := 0
			for _, p := range bc.writes {
				size += len(p)
			}
			b.SetBytes(int64(size))
			var reports, output int
			var last string
			w := NewLineWriter(func(line string, _ bool) {
				if IsProtocolLine(line) {
					reports++
					last = line
				} else {
					output++
				}
			})
			b.ReportAllocs()
			for b.Loop() {
				reports, output = 0, 0
				for _, p := range bc.writes {
					_, _ = w.Write(p)
				}
			}
			want := strings.TrimSuffix(string(heartbeat), "\n")
			if reports != bc.wantReports || output != bc.wantOutput || last != want {
				b.Fatalf("one pass gave %d reports and %d output lines (last report %q); want %d and %d (%q)",
					reports, output, last, bc.wantReports, bc.wantOutput, want)
			}
		})
	}
}

// reportsEqual compares reports field by field (Report holds a slice).
func reportsEqual(a, b Report) bool { return reflect.DeepEqual(a, b) }
