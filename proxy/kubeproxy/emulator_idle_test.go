package kubeproxy

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"pgregory.net/rapid"
)

// TestEmulatorHandlerIdle: whenever an emulator handler says it is idle for a packet
// (netsim.IdleHandler, which lets a node skip the call for an untraced packet), Handle
// returns Continue and leaves the packet exactly as it was (every field, unexported ones
// included: the raw table's carrying of an untracked state over sets one). Rulesets
// with and without each table, packets of both families, with and without an entry, in
// every conntrack state.
func TestEmulatorHandlerIdle(t *testing.T) {
	idles := 0
	rapid.Check(t, func(t *rapid.T) {
		v6 := rapid.Bool().Draw(t, "v6")
		fam := emulator.IPv4
		if v6 {
			fam = emulator.IPv6
		}
		e := emulator.New(fam)
		var text strings.Builder
		for _, table := range []string{emulator.TableRaw, emulator.TableMangle, emulator.TableNAT, emulator.TableFilter} {
			if rapid.Bool().Draw(t, "has "+table) {
				chain := "PREROUTING"
				if table == emulator.TableFilter {
					chain = "FORWARD"
				}
				text.WriteString("*" + table + "\n:" + chain + " ACCEPT [0:0]\n-A " + chain + " -p tcp -j ACCEPT\nCOMMIT\n")
			}
		}
		if text.Len() > 0 {
			if err := e.RestoreText([]byte(text.String()), emulator.RestoreOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		src, dst := netip.MustParseAddrPort("10.0.0.2:40000"), netip.MustParseAddrPort("10.96.0.1:80")
		if rapid.Bool().Draw(t, "packet v6") {
			src, dst = netip.MustParseAddrPort("[fd00::2]:40000"), netip.MustParseAddrPort("[fd00:96::1]:80")
		}
		p, err := netsim.ParsePacket(netsim.BuildTCP(netsim.TCPSegment{Src: src, Dst: dst, Flags: netfilter.TCPSyn, WindowScale: -1}))
		if err != nil {
			t.Fatal(err)
		}
		if rapid.Bool().Draw(t, "conn") {
			p.Conn = &netsim.Conn{ID: 1}
		}
		p.CtState = rapid.SampledFrom([]netfilter.CtState{netfilter.CtNew, netfilter.CtEstablished, netfilter.CtRelated, netfilter.CtInvalid, netfilter.CtUntracked}).Draw(t, "state")
		for _, spec := range EmulatorHandlers(e, "kube-proxy") {
			h := spec.Handler.(netsim.IdleHandler)
			if !h.Idle(p) {
				continue
			}
			idles++
			q := *p
			if v := h.Handle(&netsim.Context{}, &q); v != netsim.VerdictContinue {
				t.Fatalf("%s at %s: idle, but Handle returned %v", spec.Name, spec.Hook, v)
			}
			if !reflect.DeepEqual(q, *p) {
				t.Fatalf("%s at %s: idle, but Handle changed the packet:\n%#v\nwas\n%#v", spec.Name, spec.Hook, q, *p)
			}
		}
	})
	if idles == 0 {
		t.Fatal("no handler was ever idle")
	}
}
