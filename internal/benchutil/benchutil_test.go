package benchutil

import (
	"os"
	"strings"
	"testing"
)

func TestCPUTimeGrows(t *testing.T) {
	t0 := CPUTime()
	if t0 <= 0 {
		t.Fatalf("CPUTime %v, want > 0", t0)
	}
	x := 0
	for i := 0; CPUTime()-t0 < 20e6 && i < 1e10; i++ { // 20 ms of CPU
		x += i
	}
	if d := CPUTime() - t0; d < 20e6 {
		t.Fatalf("CPUTime moved %v after a busy loop, want >= 20ms (%d)", d, x)
	}
}

func TestLoadAvg(t *testing.T) {
	if _, err := os.Stat("/proc/loadavg"); err != nil {
		if LoadAvg1() != -1 || LoadAvg() != "unknown" {
			t.Fatal("no /proc/loadavg: want -1 and unknown")
		}
		t.Skip("no /proc/loadavg")
	}
	if v := LoadAvg1(); v < 0 {
		t.Fatalf("LoadAvg1 %v", v)
	}
	if s := LoadAvg(); strings.Count(s, ", ") != 2 {
		t.Fatalf("LoadAvg %q, want three figures", s)
	}
}
