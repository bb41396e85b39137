package netsim

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// TestCtTableAdvisesHugePages: a conntrack table of 4 MiB lies in a mapping the kernel
// was asked to back with huge pages (smaps' VmFlags "hg").
func TestCtTableAdvisesHugePages(t *testing.T) {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(b), "[never]") {
		t.Skipf("transparent huge pages unavailable (%q, %v)", strings.TrimSpace(string(b)), err)
	}
	var big ctTable
	big.resize(1 << 17) // 4 MiB
	if !advisedHuge(t, unsafe.Pointer(&big.slots[len(big.slots)/2])) {
		t.Error("a 4 MiB table's middle is not in a MADV_HUGEPAGE mapping")
	}
}

// advisedHuge reports whether the mapping holding p has the hugepage advice.
func advisedHuge(t *testing.T, p unsafe.Pointer) bool {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer f.Close()
	addr := uintptr(p)
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(line, " ") {
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.Contains(line+" ", " hg ")
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return false
}
