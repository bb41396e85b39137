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
