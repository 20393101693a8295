package bench

import "syscall"

// benchSysProcAttr makes the kernel stop the bench's own children (a master
// or a fleet:work) should the bench die without stopping them.
func benchSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
