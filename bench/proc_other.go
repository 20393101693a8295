//go:build !linux

package bench

import (
	"os"
	"syscall"
)

// benchSysProcAttr is nil off Linux: there is no parent-death signal.
func benchSysProcAttr() *syscall.SysProcAttr { return nil }

// peakRSSMB is 0 off Linux, where the bench does not read it.
func peakRSSMB(*os.ProcessState) float64 { return 0 }
