// Package difffuzz is what the differential fuzzers of the iptables and nftables
// emulators share: the topology they run in, the packet they send, what a client sees
// of an outcome, the regression case file format, the kernel side (a kernel.Harness
// node, sending and observing) and the driver that runs rapid, shrinks a difference
// and writes it under the emulator's testdata/difffuzz. Each emulator's test brings its
// own ruleset generator, loader and walk.
//
//	client pod 10.244.0.2 ─veth0─┐                      ┌─veth1─ srv1 pod 10.244.0.3
//	                             ├ node 10.244.0.1 ... ─┤
//	external 192.168.77.100 ─eth0┘  192.168.77.1        └─veth2─ srv2 pod 10.244.0.4
//	 (also 198.51.100.10, "vip")    (the rules)
//
// Every address is owned by one namespace, and 80 and 8080 (TCP and UDP) are open
// everywhere, answered by an echo server naming its namespace and the source it saw;
// 9090 is closed. A packet goes from the client pod, the external host or the node
// itself, so the walk starts at PREROUTING (from veth0 or eth0) or at OUTPUT.
package difffuzz

import (
	"fmt"
	"net/netip"
	"strings"

	"pgregory.net/rapid"
)

// The topology (NewKernel builds it and checks it is this one).
var (
	Gateway = netip.MustParseAddr("10.244.0.1")
	Client  = netip.MustParseAddr("10.244.0.2")
	Srv1    = netip.MustParseAddr("10.244.0.3")
	Srv2    = netip.MustParseAddr("10.244.0.4")
	Node    = netip.MustParseAddr("192.168.77.1")
	Ext     = netip.MustParseAddr("192.168.77.100")
	VIP     = netip.MustParseAddr("198.51.100.10")
	// Owner is who answers at an address.
	Owner = map[netip.Addr]string{Gateway: "node", Node: "node", Client: "client",
		Srv1: "srv1", Srv2: "srv2", Ext: "external", VIP: "external"}
	// Open are the ports echo servers listen on.
	Open = map[uint16]bool{80: true, 8080: true}
	// NodeLocal are the node's IPv4 addresses, sorted.
	NodeLocal = []netip.Addr{Gateway, netip.MustParseAddr("127.0.0.1"), Node}
	// IfaceAddrs are the node's interfaces' addresses (masquerade's choice). Loopback
	// has only host-scope addresses, so for a packet leaving by lo the kernel's
	// inet_select_addr takes the first universe-scope address of any interface in
	// ifindex order: eth0's (ifindex 2; NewKernel checks it).
	IfaceAddrs = map[string]netip.Addr{"veth0": Gateway, "veth1": Gateway, "veth2": Gateway, "eth0": Node, "lo": Node}
	// Sources are where a packet can come from, and its source addresses there.
	Sources = map[string][]netip.Addr{"client": {Client}, "external": {Ext}, "node": {Node, Gateway}}
	// InIface is the node's interface a packet from a source arrives on.
	InIface = map[string]string{"client": "veth0", "external": "eth0"}
)

// Values rules are drawn from: addresses, destination and source ports, prefix
// lengths, DNAT and SNAT targets.
var (
	Addrs     = []netip.Addr{Client, Srv1, Srv2, Node, Gateway, Ext, VIP}
	Ports     = []uint16{80, 8080, 9090}
	SrcPorts  = []uint16{1111, 2222, 3333}
	Prefixes  = []int{32, 24, 16, 16, 8, 0}
	DNATAddrs = []netip.Addr{Srv1, Srv2, Node}
	SNATAddrs = []netip.Addr{Node, Gateway}
)

// Route is the node's routing table: a pod /32 by its veth, anything else by eth0.
func Route(dst netip.Addr) string {
	switch dst {
	case Client:
		return "veth0"
	case Srv1:
		return "veth1"
	case Srv2:
		return "veth2"
	}
	return "eth0"
}

// Packet is the first packet of a connection: a TCP SYN or a UDP datagram.
type Packet struct {
	Proto    string // "tcp" or "udp"
	From     string // "client", "external" or "node"
	Src, Dst netip.AddrPort
}

func (p Packet) String() string {
	return fmt.Sprintf("%s from %s %s -> %s", p.Proto, p.From, p.Src, p.Dst)
}

// ParsePacket parses what String gives.
func ParsePacket(s string) (Packet, error) {
	f := strings.Fields(s)
	if len(f) != 6 || f[1] != "from" || f[4] != "->" || (f[0] != "tcp" && f[0] != "udp") || Sources[f[2]] == nil {
		return Packet{}, fmt.Errorf("packet %q: want \"tcp|udp from client|external|node SRC:PORT -> DST:PORT\"", s)
	}
	src, err := netip.ParseAddrPort(f[3])
	if err != nil {
		return Packet{}, fmt.Errorf("packet %q: source: %w", s, err)
	}
	dst, err := netip.ParseAddrPort(f[5])
	if err != nil {
		return Packet{}, fmt.Errorf("packet %q: destination: %w", s, err)
	}
	return Packet{Proto: f[0], From: f[2], Src: src, Dst: dst}, nil
}

// DrawOf draws one of vs (the first when shrunk).
func DrawOf[V any](t *rapid.T, label string, vs []V) V {
	return vs[rapid.IntRange(0, len(vs)-1).Draw(t, label)]
}

// Maybe is true one time in n, false when shrunk.
func Maybe(t *rapid.T, label string, n int) bool {
	return rapid.IntRange(0, n-1).Draw(t, label) == n-1
}

// GenPacket draws a packet: a source namespace and address, a destination that is not
// the source's own (the node may send to itself, over loopback).
func GenPacket(t *rapid.T) Packet {
	from := DrawOf(t, "from", []string{"client", "external", "node"})
	src := DrawOf(t, "src", Sources[from])
	var dsts []netip.Addr
	for _, a := range Addrs {
		if Owner[a] != from {
			dsts = append(dsts, a)
		}
	}
	if from == "node" {
		dsts = append(dsts, Node)
	}
	return Packet{Proto: DrawOf(t, "pkt-proto", []string{"tcp", "udp"}), From: from,
		Src: netip.AddrPortFrom(src, DrawOf(t, "sport", SrcPorts)),
		Dst: netip.AddrPortFrom(DrawOf(t, "dst", dsts), DrawOf(t, "dport", Ports))}
}
