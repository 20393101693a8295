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
