package worker

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
)

// ResidentMemoryMB returns the process's resident set size in MB, read from
// /proc on Linux; elsewhere the memory the Go runtime holds from the OS.
func ResidentMemoryMB() float64 {
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		fields := bytes.Fields(b)
		if len(fields) > 1 {
			if pages, err := strconv.ParseInt(string(fields[1]), 10, 64); err == nil {
				return float64(pages*int64(os.Getpagesize())) / (1 << 20)
			}
		}
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.Sys) / (1 << 20)
}
