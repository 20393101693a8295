package process

import "testing"

func TestWorkerGCUnlessGOGCIsSet(t *testing.T) {
	if pct, ok := workerGC([]string{"HOME=/x"}); !ok || pct != workerGCPercent {
		t.Errorf("without GOGC: %d, %v; want %d, true", pct, ok, workerGCPercent)
	}
	if pct, ok := workerGC([]string{"GOGC=50"}); ok {
		t.Errorf("with GOGC=50 the worker sets %d; want GOGC left to the runtime", pct)
	}
}
