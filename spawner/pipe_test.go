//go:build unix

package spawner

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenReportPipe(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// A descriptor as a child inherits it: without close-on-exec.
	fd, err := unix.Dup(int(w.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	f, err := OpenReportPipe(strconv.Itoa(fd))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("the report pipe is not close-on-exec: flags %#x, %v", flags, err)
	}
	if _, err := f.Write(FormatReport(Report{Type: ReportHeartbeat})); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	if n, err := r.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), LinePrefix) {
		t.Fatalf("read %q, %v", buf[:n], err)
	}

	for _, bad := range []string{"", "x", "0", "1", "2", "-1", "3.0", strconv.Itoa(int(r.Fd())), "1000000"} {
		if f, err := OpenReportPipe(bad); err == nil {
			f.Close()
			t.Errorf("OpenReportPipe(%q) opened a report pipe", bad)
		} else if !strings.Contains(err.Error(), ProtocolFDEnv) {
			t.Errorf("OpenReportPipe(%q): %v does not name %s", bad, err, ProtocolFDEnv)
		}
	}
}
