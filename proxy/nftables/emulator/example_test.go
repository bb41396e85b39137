package emulator_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	nftemu "github.com/clusterlab/clusterlab/proxy/nftables/emulator"
)

// env is a datapath's Env: its clock, its seeded choices, its local addresses.
type env struct{ local netip.Addr }

func (env) Now() time.Time              { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
func (env) Pick(n int) int              { return n - 1 }
func (env) DryRun() bool                { return false }
func (e env) IsLocal(a netip.Addr) bool { return a == e.local || a.IsLoopback() }
func mustAddr(s string) netip.Addr      { return netip.MustParseAddr(s) }
func must(e *nftemu.Emulator, err error) *nftemu.Emulator {
	if err != nil {
		panic(err)
	}
	return e
}

// A datapath runs the base chains at a hook in order, stopping at the first that
// decides (a drop, a reject, or a NAT it then applies).
func ExampleEmulator_RunChain() {
	e := must(nftemu.Load([]byte(`table ip demo {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 10.96.0.10 meta l4proto udp dnat to numgen random mod 2 map { 0 : 10.244.1.5 . 53, 1 : 10.244.2.7 . 53 }
	}
}
`), "demo.nft"))
	q := &nftemu.Packet{Proto: netfilter.ProtoUDP, Src: mustAddr("10.244.0.3"), Dst: mustAddr("10.96.0.10"), SrcPort: 40000, DstPort: 53}
	for _, bc := range e.BaseChains(netfilter.Prerouting) {
		tr := &nftemu.Trace{}
		v := e.RunChain(env{}, bc, q, tr)
		fmt.Println(bc.Family, bc.Table, bc.Chain, bc.Priority)
		fmt.Println(v.NAT.Kind, v.NAT.Dest(), "by", v.Reason)
		fmt.Print(tr)
	}
	// Output:
	// ip demo pre -100
	// DNAT 10.244.2.7:53 by ip demo pre line 4
	//   ip demo pre (type nat hook prerouting priority -100)
	//     ✓ line 4: ip daddr 10.96.0.10 meta l4proto udp dnat to numgen random mod 2 map { 0 : 10.244.1.5 . 53, 1 : 10.244.2.7 . 53 }  [element 1]  [numgen random mod 2 = 1]  => DNAT 10.244.2.7:53
}
