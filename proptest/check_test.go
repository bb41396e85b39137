package proptest

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// TestIPTablesHoldsEveryInvariant: kube-proxy's iptables mode on netsim keeps every
// invariant over generated cases.
func TestIPTablesHoldsEveryInvariant(t *testing.T) {
	rapid.Check(t, Property(Options{}, KubeProxy(kubeproxy.IPTables), "iptables"))
}

// TestIPVSHoldsEveryInvariant: kube-proxy's IPVS mode keeps every invariant, as its
// Semantics allow (no localhost NodePorts, cluster endpoints where a Local policy
// finds none, round robin without random branches). The userspace mode terminates
// connections, which probes cannot follow: package proptest/conformance holds it to
// the iptables mode with real connections.
func TestIPVSHoldsEveryInvariant(t *testing.T) {
	rapid.Check(t, Property(Options{}, KubeProxy(kubeproxy.IPVS), "ipvs"))
}
