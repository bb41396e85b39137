package proxy

import (
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// KernelHas decides a kernel change by the node's release (zero: a current kernel) and
// panics on a name that is not a kernel change.
func TestKernelHas(t *testing.T) {
	for _, tc := range []struct {
		k    netfilter.KernelVersion
		want bool
	}{
		{netfilter.KernelVersion{Major: 4, Minor: 19}, false},
		{netfilter.KernelVersion{Major: 5, Minor: 8}, false},
		{netfilter.KernelVersion{Major: 5, Minor: 9}, true},
		{netfilter.KernelVersion{Major: 6, Minor: 6}, true},
		{netfilter.KernelVersion{}, true},
	} {
		if got := KernelHas("ipvs-conn-reuse-unconfirmed-conntrack", tc.k); got != tc.want {
			t.Errorf("Linux %s: %v, want %v", tc.k, got, tc.want)
		}
	}
	for _, name := range []string{"no-such-change", "ipvs-conn-reuse-mode-left-on-5.9"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("KernelHas(%q) did not panic", name)
				}
			}()
			KernelHas(name, netfilter.KernelVersion{})
		}()
	}
	// IPVS changes of kube-proxy follow the release.
	if (&NodeConfig{Version: 21}).Has("ipvs-conn-reuse-mode-left-on-5.9") || !(&NodeConfig{}).Has("ipvs-conn-reuse-mode-left-on-5.9") {
		t.Error("ipvs-conn-reuse-mode-left-on-5.9 does not follow the release")
	}
}
