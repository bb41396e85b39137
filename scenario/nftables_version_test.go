package scenario

import (
	"strings"
	"testing"
)

// The nftables mode (proxy change nftables-mode) needs the NFTablesProxyMode gate in
// kube-proxy 1.29-1.30, where it is alpha and off by default: a scenario choosing the
// mode there without turning the gate on is an error naming the gate; with the gate,
// or from 1.31 (beta, on by default), it loads.
func TestNFTablesModeNeedsGateBefore131(t *testing.T) {
	for _, tc := range []struct {
		version, gates, want string
	}{
		{"1.29", "", "bad.yaml:4: cluster.proxy.version: 1.29: the nftables proxy mode needs the NFTablesProxyMode feature gate in kube-proxy 1.29"},
		{"1.30", "", "needs the NFTablesProxyMode feature gate"},
		{"1.30", "    feature_gates: {NFTablesProxyMode: false}\n", "needs the NFTablesProxyMode feature gate"},
		{"1.29", "    feature_gates: {NFTablesProxyMode: true}\n", ""},
		{"1.31", "", ""},
		{"1.37", "", ""},
	} {
		src := "cluster:\n  proxy:\n    mode: nftables\n    version: \"" + tc.version + "\"\n" + tc.gates
		_, err := Parse("bad.yaml", []byte(src))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %q: %v", tc.version, tc.gates, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %q: error %v, want %q", tc.version, tc.gates, err, tc.want)
		}
	}
}
