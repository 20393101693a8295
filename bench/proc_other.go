//go:build !linux

package bench

import "syscall"

// benchSysProcAttr is nil off Linux: there is no parent-death signal.
func benchSysProcAttr() *syscall.SysProcAttr { return nil }
