package vmtest

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// secondKernelCases is how many cases each differential fuzzer draws in the guest, from
// the package's fixed seed: TCG runs a case ten to fifty times slower than the host
// (docs/PERFORMANCE.md), so far fewer than on the host. CLUSTERLAB_DIFFFUZZ=N asks for
// N (still from the fixed seed: the number goes to -rapid.checks, the variable does not
// reach the guest) and N/20 conformance cases (-kernel-cases; 1 by default).
const secondKernelCases = 6

// TestSecondKernelVM runs the kernel differentials the host runs on its own kernel
// again on the guest's (Debian's 6.1), in one boot: the iptables emulator's
// differential fuzzer (the nft backend, as on the host; CLUSTERLAB_VM_LEGACY=1 adds
// the legacy one), the nftables emulator's, package kernel's conntrack tests (the
// conntrack tool's parser and a real DNAT entry read back), and the conformance
// suite's kernel comparison (iptables mode on real namespaces). Each is the package's
// own test binary (KindGoTest) with fewer cases than on the host, from the same fixed
// seed; every regression case the fuzzers keep is replayed. Where a test models a
// kernel release it models the running kernel's (uname), 6.1 here; the emulators
// model none (docs/VERSIONS.md), and the fuzzers log the release that answered.
func TestSecondKernelVM(t *testing.T) {
	n := secondKernelCases
	if s := os.Getenv("CLUSTERLAB_DIFFFUZZ"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("CLUSTERLAB_DIFFFUZZ=%q: want a number of cases", s)
		}
		n = v
	}
	checks := "-rapid.checks=" + strconv.Itoa(n)
	conformance := "-kernel-cases=" + strconv.Itoa(max(1, n/20))
	// A fuzzer case takes about a second in the guest at a low load, up to ten at a
	// high one.
	per := 150*time.Second + time.Duration(n-secondKernelCases)*5*time.Second
	runs := []GoTestRun{
		{Name: "iptables-nft", Pkg: "../../proxy/iptables/emulator", Args: []string{"-test.run=^TestKernelDiffFuzz$", "-test.v", checks}, Timeout: per},
		{Name: "nftables", Pkg: "../../proxy/nftables/emulator", Args: []string{"-test.run=^TestKernelNFTDiffFuzz$", "-test.v", checks}, Timeout: per},
		{Name: "kernel", Pkg: "../../kernel", Args: []string{"-test.run=^(TestConntrackKernel|TestParseConntrack.*)$", "-test.v"}, Timeout: per},
		{Name: "conformance", Pkg: "../../proptest/conformance", Args: []string{"-test.run=^TestKernelAgrees$", "-test.v", conformance}, Timeout: per},
	}
	if os.Getenv("CLUSTERLAB_VM_LEGACY") != "" {
		runs = append(runs, GoTestRun{Name: "iptables-legacy", Pkg: "../../proxy/iptables/emulator", Args: []string{"-test.run=^TestKernelDiffFuzz$", "-test.v", checks},
			Env: []string{"CLUSTERLAB_DIFFFUZZ_BACKEND=legacy"}, Timeout: per})
	}
	RunGoTests(t, runs, Config{Timeout: 3*time.Minute + time.Duration(len(runs))*per})
}
