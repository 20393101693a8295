package bench

import (
	"os"
	"syscall"
)

// benchSysProcAttr makes the kernel stop the bench's own children (a master
// or a fleet:work) should the bench die without stopping them.
func benchSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

// peakRSSMB is the peak resident memory, in MiB, of a process that has
// exited, as the kernel counted it (ru_maxrss, in KiB on Linux).
func peakRSSMB(ps *os.ProcessState) float64 {
	if ps == nil {
		return 0
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return float64(ru.Maxrss) / 1024
	}
	return 0
}
