package kubeproxy

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/service"
)

// TestEmulatorHandlerSkipsAbsentTables: the handlers of the tables kube-proxy writes no
// rules to (raw, mangle, security) return at once when the emulator has no chain there
// (emulator.HasChainAt), without building the emulator's packet; a traced packet still
// goes through RunTable. Two clusters built alike, one probed with traces and one
// without, must reach the same backends and leave the same rule counters and conntrack
// entries on every node, also after a restore adds a mangle rule that marks packets.
// The IPVS mode's handler (which builds a forwarded packet's reason only for a trace)
// must reach the same backends and leave the same IPVS connections with and without.
func TestEmulatorHandlerSkipsAbsentTables(t *testing.T) {
	t.Run("iptables", func(t *testing.T) { testTracedAndUntraced(t, IPTables) })
	t.Run("ipvs", func(t *testing.T) { testTracedAndUntraced(t, IPVS) })
}

func testTracedAndUntraced(t *testing.T, mode Mode) {
	build := func() (*cluster.Cluster, netsim.Probe) {
		c := newCluster(t, mode)
		if err := c.Apply(service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("", 80, 9376))); err != nil {
			t.Fatal(err)
		}
		backends(t, c)
		if _, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
			t.Fatal(err)
		}
		return c, netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vipOf(t, c, "my-service", 80), Mode: netsim.ProbeConnect}
	}
	plain, p := build()
	traced, _ := build()
	for round := range 2 {
		if round == 1 && mode == IPTables {
			for _, c := range []*cluster.Cluster{plain, traced} {
				for _, n := range c.Nodes() {
					if err := Emulator(n, netip.Addr{}).RestoreText([]byte("*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp -j MARK --set-xmark 0x10/0x10\nCOMMIT\n"), emulator.RestoreOptions{NoFlush: true}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		for i := range 40 {
			p.SrcPort = uint16(40000 + 100*round + i)
			p.Trace = false
			a, err := plain.ProbeOne(p)
			if err != nil {
				t.Fatal(err)
			}
			p.Trace = true
			b, err := traced.ProbeOne(p)
			if err != nil {
				t.Fatal(err)
			}
			if a.Outcome != b.Outcome {
				t.Fatalf("round %d probe %d: %v untraced, %v traced", round, i, a.Outcome, b.Outcome)
			}
			if a.Result != netsim.ResultConnected {
				t.Fatalf("round %d probe %d: %v", round, i, a.Outcome)
			}
		}
	}
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		if mode == IPTables {
			ca := Emulator(plain.Node(name), netip.Addr{}).SaveCounters()
			cb := Emulator(traced.Node(name), netip.Addr{}).SaveCounters()
			if !bytes.Equal(ca, cb) {
				t.Errorf("%s: counters differ:\nuntraced:\n%s\ntraced:\n%s", name, ca, cb)
			}
		} else {
			la, lb := IPVSModel(plain.Node(name)).Listing(false), IPVSModel(traced.Node(name)).Listing(false)
			if la != lb {
				t.Errorf("%s: IPVS differs:\nuntraced:\n%s\ntraced:\n%s", name, la, lb)
			}
		}
		ea, eb := plain.Node(name).Conntrack().Entries(), traced.Node(name).Conntrack().Entries()
		if len(ea) != len(eb) {
			t.Fatalf("%s: %d conntrack entries untraced, %d traced", name, len(ea), len(eb))
		}
		for i := range ea {
			if ea[i].String() != eb[i].String() {
				t.Errorf("%s: entry %d: %s untraced, %s traced", name, i, &ea[i], &eb[i])
			}
		}
	}
}
