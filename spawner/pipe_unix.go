//go:build unix

package spawner

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// OpenReportPipe opens, for a worker, the report pipe its master announced
// with ProtocolFDEnv; announced is the variable's value ("3"). It fails
// when that is not a descriptor above stderr open for writing: a worker
// whose master reads its reports from a pipe must not write them anywhere
// else. The descriptor is made close-on-exec, so that no program the
// worker starts (a handler's subprocess) inherits it.
func OpenReportPipe(announced string) (*os.File, error) {
	fd, err := strconv.Atoi(announced)
	if err != nil || fd <= 2 {
		return nil, fmt.Errorf("spawner: %s=%q is not a file descriptor above stderr", ProtocolFDEnv, announced)
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, fmt.Errorf("spawner: report pipe %d (announced by %s) is not open: %w", fd, ProtocolFDEnv, err)
	}
	if flags&(unix.O_WRONLY|unix.O_RDWR) == 0 {
		return nil, fmt.Errorf("spawner: report pipe %d (announced by %s) is not open for writing", fd, ProtocolFDEnv)
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "fleet-report-pipe"), nil
}
