//go:build !unix

package spawner

import "os"

// killedBy returns "": outside Unix a process is not killed by a named
// signal.
func killedBy(*os.ProcessState) string { return "" }
