//go:build unix

package spawner

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// killedBy returns the name of the signal that killed the process
// ("SIGKILL"), or "" when it exited on its own.
func killedBy(st *os.ProcessState) string {
	if st == nil {
		return ""
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return ""
	}
	if name := unix.SignalName(ws.Signal()); name != "" {
		return name
	}
	return ws.Signal().String()
}
