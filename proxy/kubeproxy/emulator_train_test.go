package kubeproxy

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
)

// Trains through the iptables mode: 2 MiB over one connection through a ClusterIP,
// client on node-a, backend on node-b, and 1 MiB back, with trains and with every GSO packet cut at the
// link (NoTrains). The bytes arrive intact; with trains most of them cross both nodes as
// trains; and on both nodes, either way, the filter table's FORWARD jump to
// KUBE-FORWARD (which every forwarded packet takes) counts exactly the packets and
// bytes conntrack counted for the connection in both directions: the emulator's
// counters advance by a train's segments and their bytes (emulator_train.go), as
// conntrack's do.
func TestTrainsThroughIPTables(t *testing.T) {
	trainsThroughMode(t, IPTables, nil, func(t *testing.T, n *cluster.Node) string {
		for _, l := range strings.Split(string(Emulator(n, netip.Addr{}).SaveCounters("filter")), "\n") {
			if strings.Contains(l, "-A FORWARD") && strings.Contains(l, "-j KUBE-FORWARD") {
				return l
			}
		}
		return ""
	})
}

// Trains through the IPVS mode, as through the iptables mode above: IPVS's FORWARD
// handler answers for trains (ipvsForward.PeekTrain). On node-a, where IPVS forwards
// the connection (its SYN through INPUT, not FORWARD), the virtual service's packets
// and bytes in and out are exactly conntrack's (the model sees every segment of a
// train); on node-b the iptables rules around IPVS count them at FORWARD.
func TestTrainsThroughIPVS(t *testing.T) {
	trainsThroughMode(t, IPVS, nil, func(t *testing.T, n *cluster.Node) string {
		if n.Name() == "node-a" {
			var pkts, bytes uint64
			for _, s := range IPVSModel(n).Traffic() {
				pkts += s.Stats.InPkts + s.Stats.OutPkts
				bytes += s.Stats.InBytes + s.Stats.OutBytes
			}
			return fmt.Sprintf("[%d:%d] IPVS in and out", pkts, bytes)
		}
		for _, l := range strings.Split(string(IPVSEmulator(n, corev1.IPv4Protocol).SaveCounters("filter")), "\n") {
			if strings.Contains(l, "-A FORWARD") && strings.Contains(l, "-j KUBE-FORWARD") {
				return l
			}
		}
		return ""
	})
}

// Trains through the nftables mode, as through the iptables mode above: kube-proxy's
// base chains answer for trains (nftHandler.PeekTrain), and a counter in a base chain
// of another table at the forward hook, added on each node, counts exactly the packets
// and bytes conntrack counted.
func TestTrainsThroughNFTables(t *testing.T) {
	const table = "table ip trains {\n\tchain fwd {\n\t\ttype filter hook forward priority 10; policy accept;\n\t\tmeta l4proto tcp counter\n\t}\n}\n"
	trainsThroughMode(t, NFTables, func(t *testing.T, n *cluster.Node) {
		p := n.Proxy().(*nftablesProxy)
		if err := p.emu.ApplyScript([]byte(table), "trains"); err != nil {
			t.Fatal(err)
		}
		p.att.Sync()
	}, func(t *testing.T, n *cluster.Node) string {
		for _, l := range strings.Split(NFTEmulator(n).String(), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "meta l4proto tcp counter") {
				var pkts, bytes uint64
				if _, err := fmt.Sscanf(l, "meta l4proto tcp counter packets %d bytes %d", &pkts, &bytes); err != nil {
					t.Fatalf("%q: %v", l, err)
				}
				return fmt.Sprintf("[%d:%d] %s", pkts, bytes, l)
			}
		}
		return ""
	})
}

// trainsThroughMode sends 2 MiB from a client pod through a ClusterIP to a backend on
// the other node, in the mode, with trains and without; setup (may be nil) runs on each
// node first; counted returns a node's counter of the flow's forwarded packets as
// "[packets:bytes] ...".
func trainsThroughMode(t *testing.T, mode Mode, setup func(*testing.T, *cluster.Node), counted func(*testing.T, *cluster.Node) string) {
	for _, noTrains := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoTrains=%v", noTrains), func(t *testing.T) {
			c, err := cluster.New(cluster.Config{Seed: 11, NoTrains: noTrains, Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}}, Proxy: Factory(Options{Mode: mode})})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			if setup != nil {
				for _, name := range []string{"node-a", "node-b"} {
					setup(t, c.Node(name))
				}
			}
			cli, ln := serviceAcrossNodes(t, c, "bulk")
			const total = 2 << 20
			got := make(chan []byte, 1)
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					got <- nil
					return
				}
				b, _ := io.ReadAll(conn)
				conn.Write(b[:len(b)/2]) // half of it back: trains the other way
				conn.Close()
				got <- b
			}()
			want := make([]byte, total)
			for i := range want {
				want[i] = byte(i*7 + i>>11)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var conn interface {
				io.ReadWriteCloser
				CloseWrite() error
			}
			vip := vipOf(t, c, "bulk", 80)
			for conn == nil { // the rules may not be synced yet
				cc, err := cli.Net().DialContext(ctx, "tcp", vip.String())
				if err == nil {
					conn = cc.(interface {
						io.ReadWriteCloser
						CloseWrite() error
					})
					break
				}
				if ctx.Err() != nil {
					t.Fatal(err)
				}
			}
			if _, err := conn.Write(want); err != nil {
				t.Fatal(err)
			}
			conn.CloseWrite()
			back := make([]byte, total/2)
			if _, err := io.ReadFull(conn, back); err != nil || string(back) != string(want[:total/2]) {
				t.Fatalf("read back %v: not the first half of what was sent", err)
			}
			conn.Close()
			if b := <-got; string(b) != string(want) {
				t.Fatalf("received %d bytes, not the %d sent", len(b), len(want))
			}
			var whole uint64
			for _, name := range []string{"node-a", "node-b"} {
				n := c.Node(name)
				w, _ := n.TrainCounts()
				whole += w
				var pkts, bytes uint64
				for _, e := range n.Conntrack().Entries() {
					if e.Orig.Src == cli.IP() {
						pkts += e.Packets[0] + e.Packets[1]
						bytes += e.Bytes[0] + e.Bytes[1]
					}
				}
				jump := counted(t, n)
				if want := fmt.Sprintf("[%d:%d] ", pkts, bytes); !strings.HasPrefix(jump, want) {
					t.Errorf("%s: the counter of forwarded packets reads %q, conntrack %s", name, jump, want)
				}
				if pkts < total/1448 {
					t.Errorf("%s: conntrack counted %d packets for %d bytes", name, pkts, total)
				}
			}
			into, toCli := c.Node("node-b").TrainsIntoPods(), c.Node("node-a").TrainsIntoPods()
			if noTrains != (toCli == 0) {
				t.Errorf("NoTrains=%v: %d trains delivered whole into the client", noTrains, toCli)
			}
			t.Logf("trains passed whole: %d; delivered whole into the backend: %d", whole, into)
			if noTrains != (into == 0) {
				t.Errorf("NoTrains=%v: %d trains delivered whole into the backend", noTrains, into)
			}
			if noTrains != (whole == 0) || !noTrains && whole < 20 {
				t.Errorf("NoTrains=%v: %d trains passed whole", noTrains, whole)
			}
		})
	}
}
