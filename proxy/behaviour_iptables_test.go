package proxy

import (
	"net/netip"
	"testing"

	"k8s.io/utils/ptr"
)

// route_localnet (kubernetes#107684): before 1.24 set whenever localhost NodePorts are
// on; from 1.24 only when --nodeport-addresses selects 127.0.0.0/8.
func TestIPTablesSetsRouteLocalnet(t *testing.T) {
	for _, tc := range []struct {
		version Version
		npa     []string
		off     bool
		want    bool
	}{
		{23, nil, false, true},
		{23, []string{"10.0.0.0/8"}, false, true},
		{24, nil, false, true},
		{24, []string{"10.0.0.0/8"}, false, false},
		{24, []string{"10.0.0.0/8", "127.0.0.0/8"}, false, true},
		{25, nil, true, false},
		{30, []string{NodePortAddressesPrimary}, false, false},
	} {
		c := NodeConfig{Version: tc.version, NodePortAddresses: tc.npa, IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}}
		if tc.off {
			c.LocalhostNodePorts = ptr.To(false)
		}
		if got := c.IPTablesSetsRouteLocalnet(); got != tc.want {
			t.Errorf("%s, --nodeport-addresses %v, localhost NodePorts off %v: route_localnet %v, want %v", tc.version, tc.npa, tc.off, got, tc.want)
		}
	}
}
