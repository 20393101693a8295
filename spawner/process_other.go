//go:build !linux

package spawner

import "syscall"

// sysProcAttr has no parent-death signal outside Linux: there a worker
// notices its master is gone when its stdin reaches EOF.
func sysProcAttr() *syscall.SysProcAttr { return nil }
