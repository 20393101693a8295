package pgbouncertest

import "syscall"

// sysProcAttr runs PgBouncer as cred (nil: as this process), and ends it
// should the test process die without stopping it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGTERM}
}
