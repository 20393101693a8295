//go:build linux

package spawner

import "syscall"

// sysProcAttr makes the kernel SIGKILL a worker when the thread that started
// it dies, which in practice means when the master dies. (Strictly it is the
// starting thread, and a Go thread can end before its process does: only when
// a goroutine that called runtime.LockOSThread returns without unlocking. A
// master must not do that, or some of its workers die with that thread.)
func sysProcAttr() *syscall.SysProcAttr {
	// Pdeathsig: a worker dies with its master. Setpgid: a worker is in a
	// process group of its own, so a terminal's Ctrl-C (sent to the whole
	// foreground group) reaches only the master, which stops its workers
	// gracefully through their stdin; pressed twice, it cannot kill the
	// workers mid-job.
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
