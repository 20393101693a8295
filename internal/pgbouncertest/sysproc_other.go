//go:build unix && !linux

package pgbouncertest

import "syscall"

// sysProcAttr runs PgBouncer as cred (nil: as this process).
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
