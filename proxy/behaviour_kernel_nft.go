package proxy

// Kernel changes of nf_tables that show in what kube-proxy's nftables mode reads back,
// found by running package kernel's tests on a second kernel (internal/vmtest's
// TestSecondKernelVM boots Debian's 6.1; the host runs 6.18).
func init() {
	registerChanges(
		Change{Name: "nftables-element-timeout-listing", Area: "kernel (nftables)", Modes: []string{"nftables"},
			Kernel: "6.12", Ref: "Linux 4201f3938914 (nf_tables element timeout series)",
			Doc: "`nft list` of a set with a default timeout: before, the kernel dumps every element's timeout, so an element the packet path added " +
				"(kube-proxy's ClientIP affinity, `update @affinity-… { ip saddr }`) lists as `10.244.0.2 timeout 3h expires 2h59m59s912ms`; from this " +
				"release it leaves the timeout out when it equals the set's (`10.244.0.2 expires 2h59m59s912ms`).",
			Modelled: ModelledNo, Note: "the nftables emulator lists as kernels from this release do, whatever the node's kernel; the release is that of " +
				"the series that reworked element timeouts (read from the patches, not verified); found on 6.1 in internal/vmtest's VM",
			Test: "kernel.TestNFTablesHarnessAffinity"},
	)
}
