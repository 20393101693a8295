package spawner

import (
	"strings"
	"testing"
)

func TestReportRoundTrip(t *testing.T) {
	t.Parallel()
	in := Report{Type: ReportHeartbeat, Jobs: 12, Running: 3, MemoryMB: 41.5}
	line := string(FormatReport(in))
	if !strings.HasPrefix(line, "@fleet {") || !strings.HasSuffix(line, "}\n") || strings.Count(line, "\n") != 1 {
		t.Fatalf("line = %q", line)
	}
	out, err := ParseReport(line)
	if err != nil {
		t.Fatal(err)
	}
	in.V = ProtocolVersion
	if out.V != 1 || out.Type != in.Type || out.Jobs != 12 || out.Running != 3 || out.MemoryMB != 41.5 {
		t.Fatalf("got %+v, want %+v", out, in)
	}
}

func TestCommandRoundTrip(t *testing.T) {
	t.Parallel()
	for _, ct := range []CommandType{CommandPause, CommandContinue, CommandStop} {
		c, err := ParseCommand(string(FormatCommand(Command{Type: ct})))
		if err != nil || c.Type != ct {
			t.Errorf("%s: got %+v, %v", ct, c, err)
		}
	}
}

func TestParseRejectsMalformedLines(t *testing.T) {
	t.Parallel()
	for _, line := range []string{
		"hello world",
		"@fleet ",
		"@fleet {not json",
		`@fleet {"v":1,"type":"dance"}`,
		`@fleet {"v":2,"type":"ready"}`,
		`@fleet {"type":"ready"}`,
	} {
		if r, err := ParseReport(line); err == nil {
			t.Errorf("ParseReport(%q) = %+v, want an error", line, r)
		}
	}
}

func TestExitReasonRecycled(t *testing.T) {
	t.Parallel()
	for r, want := range map[ExitReason]bool{
		ExitMaxJobs: true, ExitMaxMemory: true, ExitMaxTime: true,
		ExitStopped: false, ExitCrash: false, ExitTimeout: false, ExitEmpty: false,
	} {
		if r.Recycled() != want {
			t.Errorf("%s.Recycled() = %v", r, !want)
		}
	}
}

func TestExitReasonAgrees(t *testing.T) {
	t.Parallel()
	for _, r := range []ExitReason{ExitMaxJobs, ExitMaxMemory, ExitMaxTime, ExitEmpty, ExitStopped, ExitFenced} {
		for code, want := range map[int]bool{0: true, ExitCodeUnsaved: true, 1: false, 3: false, ExitCodeJobTimedOut: false, -1: false} {
			if r.Agrees(code) != want {
				t.Errorf("%s.Agrees(%d) = %v", r, code, !want)
			}
		}
	}
	for code, want := range map[int]bool{ExitCodeJobTimedOut: true, 0: false, 1: false, ExitCodeUnsaved: false, -1: false} {
		if ExitTimeout.Agrees(code) != want {
			t.Errorf("timeout.Agrees(%d) = %v", code, !want)
		}
	}
	for code, want := range map[int]bool{1: true, 3: true, -1: true, 0: false} {
		if ExitError.Agrees(code) != want {
			t.Errorf("error.Agrees(%d) = %v", code, !want)
		}
	}
	for _, code := range []int{0, 1, -1} {
		if ExitCrash.Agrees(code) || ExitReason("reboot").Agrees(code) || ExitReason("").Agrees(code) {
			t.Errorf("crash, an unknown reason or none agrees with %d", code)
		}
	}
	for _, tc := range []struct {
		reported ExitReason
		code     int
		want     ExitReason
	}{
		{"", 0, ExitStopped},
		{"", 3, ExitCrash},
		{"", -1, ExitCrash},
		{ExitMaxJobs, 0, ExitMaxJobs},
		{ExitMaxJobs, 3, ExitCrash},
		{ExitMaxJobs, -1, ExitCrash},
		{ExitStopped, ExitCodeUnsaved, ExitStopped},
		{ExitTimeout, ExitCodeJobTimedOut, ExitTimeout},
		{ExitTimeout, 0, ExitCrash},
		{ExitError, 1, ExitError},
		{"reboot", 0, ExitCrash},
	} {
		if got := ExitFor(tc.reported, tc.code); got != tc.want {
			t.Errorf("ExitFor(%q, %d) = %q, want %q", tc.reported, tc.code, got, tc.want)
		}
	}
}

// TestParseRejectsTrailingData: a line is one object; what follows it
// makes the line malformed, so that a report glued to other text (an
// unterminated line followed by a report) is not taken for that report.
func TestParseRejectsTrailingData(t *testing.T) {
	t.Parallel()
	line := strings.TrimSuffix(string(FormatReport(Report{Type: ReportHeartbeat, MemoryMB: 2})), "\n")
	for _, bad := range []string{line + "x", line + `{"v":1}`, line + " trailing", line + line[len(LinePrefix):]} {
		if r, err := ParseReport(bad); err == nil {
			t.Errorf("ParseReport(%q) = %+v, want an error", bad, r)
		}
	}
	for _, good := range []string{line, line + " ", line + "\r\n", line + "\t"} {
		if _, err := ParseReport(good); err != nil {
			t.Errorf("ParseReport(%q): %v", good, err)
		}
	}
	if _, err := ParseCommand(`@fleet {"v":1,"type":"stop"} and more`); err == nil {
		t.Errorf("a command with trailing data parsed")
	}
}
