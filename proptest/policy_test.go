package proptest

import (
	"testing"

	"pgregory.net/rapid"
)

// TestPolicyReachabilityMatchesReference: under every kube-proxy mode that does not
// terminate connections on the node, the simulation's reachability of every pod pair
// (to the pod's IP and through its Service) is netpol.Reference's.
func TestPolicyReachabilityMatchesReference(t *testing.T) {
	modes := PolicyModes()
	if len(modes) < 3 {
		t.Fatalf("policy modes %v: want iptables, ipvs and nftables at least", modes)
	}
	rapid.Check(t, func(rt *rapid.T) {
		c := PolicyCases().Draw(rt, "case")
		for _, m := range modes {
			w, err := BuildPolicy(c, m)
			if err != nil {
				rt.Fatalf("build under %s: %v\n%s", m, err, c)
			}
			err = CheckPolicyReachability(w)
			w.Close()
			if err != nil {
				rt.Fatalf("%v\ncase:\n%s", err, c)
			}
		}
	})
}
