package nodewalk

import (
	"bytes"
	"math"
	"net/netip"
	"testing"

	ipt "github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	nftemu "github.com/clusterlab/clusterlab/proxy/nftables/emulator"
)

// FuzzWalkBoth: for any iptables dump and nft ruleset that load, walks of a few
// packets through both never fail or panic, are deterministic, and, without
// assumptions or truncation, give outcomes whose probabilities sum to 1.
func FuzzWalkBoth(f *testing.F) {
	f.Add([]byte("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -d 10.244.1.5/32 -j ACCEPT\nCOMMIT\n"), []byte(kubeDNAT))
	f.Add([]byte("*mangle\n:PREROUTING ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n-A FORWARD -m statistic --mode random --probability 0.25 -j MARK --set-xmark 0x8/0x8\n-A FORWARD -m physdev --physdev-in veth0 -j DROP\nCOMMIT\n"),
		[]byte("table ip k {\n\tchain p {\n\t\ttype nat hook prerouting priority -150; policy accept;\n\t\tip daddr 10.96.0.10 dnat to numgen random mod 3 map { 0 : 10.244.1.5, 1 : 10.244.2.6, 2 : 10.0.0.20 }\n\t}\n\tchain f {\n\t\ttype filter hook forward priority 0; policy accept;\n\t\tmeta skuid 0 drop\n\t}\n}\n"))
	f.Add([]byte("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -j MASQUERADE\n-A OUTPUT -p tcp -j REDIRECT --to-ports 15001\nCOMMIT\n"),
		[]byte("table inet fw {\n\tchain o {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tmasquerade\n\t}\n}\n"))
	f.Fuzz(func(t *testing.T, dump, ruleset []byte) {
		d, err := ipt.Load(dump, ipt.IPv4, "fuzz.dump")
		if err != nil {
			return
		}
		n, err := nftemu.Load(ruleset, "fuzz.nft")
		if err != nil {
			return
		}
		node := &Node{IPTables: d, NFT: n}
		in := Input{AllBranches: true, MaxPaths: 64, Local: []netip.Addr{netip.MustParseAddr("10.0.0.20")},
			IfaceAddrs: map[string]netip.Addr{"eth0": netip.MustParseAddr("10.0.0.20")}, OutIface: "eth0"}
		for _, p := range []ipt.Packet{tcp("10.0.0.9", "10.96.0.10", 80), tcp("10.0.0.20", "10.96.0.10", 80), tcp("10.0.0.9", "10.0.0.20", 22)} {
			in.Packet = p
			res, err := Walk(node, in)
			if err != nil {
				t.Fatal(err)
			}
			again, err := Walk(node, in)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := res.JSON()
			b, _ := again.JSON()
			if !bytes.Equal(a, b) {
				t.Fatalf("two walks of %s differ:\n%s\n---\n%s", p.String(), a, b)
			}
			sum, assumed := 0.0, false
			for _, o := range res.Outcomes {
				sum += o.Probability
				assumed = assumed || len(o.Assumptions) > 0
			}
			if !res.Truncated && !assumed && math.Abs(sum-1) > 1e-9 {
				t.Fatalf("%s: probabilities sum to %v:\n%s", p.String(), sum, res.Text())
			}
		}
	})
}
