package conformance

import (
	"flag"
	"strconv"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/internal/vmtest"
)

// TestKernelAgreesIPVSVM runs TestKernelAgreesIPVS and TestKernelDifferentialNoticesIPVS
// where there is a kernel with IPVS: in a VM booting Debian's kernel (package
// internal/vmtest; this host's kernel has no IPVS), this package's test binary,
// cross-built, runs them with the real ip, iptables-nft, ipset and conntrack tools and
// the kernel's modules (IPVS and its schedulers, xt_ipvs for the rules around it, dummy
// for kube-ipvs0). Under software emulation a generated case costs some 20-30 s in the
// guest (building the harness is most of it), so it runs one
// (-kernel-ipvs-vm-cases=N for more) to keep the VM suite within its CI budget. It
// skips with the reason where no VM can be booted (no root, no QEMU, no kernel image).
func TestKernelAgreesIPVSVM(t *testing.T) {
	mods := append(append([]string{}, vmtest.GoTestModules...), vmtest.IPVSModules...)
	mods = append(mods, "xt_ipvs")
	args := []string{"-test.run=^(TestKernelAgreesIPVS|TestKernelDifferentialNoticesIPVS)$", "-test.v",
		"-kernel-ipvs-cases=" + strconv.Itoa(*kernelIPVSVMCases)}
	if *kernelIPVSVMSeed != 0 {
		args = append(args, "-rapid.seed="+strconv.FormatUint(*kernelIPVSVMSeed, 10))
	}
	cfg := vmtest.Config{Modules: mods}
	if *kernelIPVSVMCases > 1 {
		// rapid stops drawing cases when the test's deadline is within five cases' time.
		cfg.Timeout = 3*time.Minute + time.Duration(*kernelIPVSVMCases)*3*time.Minute/2
	}
	vmtest.RunGoTests(t, []vmtest.GoTestRun{{Name: "ipvs", Pkg: ".", Args: args}}, cfg)
}

var (
	kernelIPVSVMCases = flagInt("kernel-ipvs-vm-cases", 1, "generated cases TestKernelAgreesIPVSVM runs in the VM")
	kernelIPVSVMSeed  = flag.Uint64("kernel-ipvs-vm-seed", 0, "rapid seed of TestKernelAgreesIPVSVM's cases in the VM (0: the package's fixed seed)")
)
