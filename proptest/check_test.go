package proptest

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// TestEveryModeHoldsEveryInvariant: every registered kube-proxy mode on netsim keeps
// every invariant over generated cases, as its Semantics allow (the IPVS mode: no
// localhost NodePorts, cluster endpoints where a Local policy finds none, round robin
// without random branches; the nftables mode: no localhost NodePorts). A mode that
// terminates connections (userspace), which probes cannot follow, is held to the
// iptables mode with real connections by package proptest/conformance instead.
func TestEveryModeHoldsEveryInvariant(t *testing.T) {
	n := 0
	for _, m := range kubeproxy.Registered() {
		if m.Semantics.Terminates {
			continue
		}
		n++
		t.Run(string(m.Mode), func(t *testing.T) {
			rapid.Check(t, Property(Options{}, KubeProxy(m.Mode), string(m.Mode)))
		})
	}
	if n < 3 {
		t.Errorf("%d modes checked, want iptables, IPVS and nftables at least", n)
	}
}
