package emulator

// The differential fuzzer's model side: the topology it runs in, a generator of small
// rulesets and packets, the observation the emulator predicts for a packet, and the
// regression cases under testdata/difffuzz that every `go test` replays (against the
// emulator always; against the kernel too where the kernel test can run). The kernel
// side is difffuzz_kernel_test.go.
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

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/netfilter"
)

// The fuzzer's topology (kernel.Harness builds it: see fuzzHarness).
var (
	fzGateway = mustAddr("10.244.0.1")
	fzClient  = mustAddr("10.244.0.2")
	fzSrv1    = mustAddr("10.244.0.3")
	fzSrv2    = mustAddr("10.244.0.4")
	fzNode    = mustAddr("192.168.77.1")
	fzExt     = mustAddr("192.168.77.100")
	fzVIP     = mustAddr("198.51.100.10")
	// fzOwner is who answers at an address.
	fzOwner = map[netip.Addr]string{fzGateway: "node", fzNode: "node", fzClient: "client",
		fzSrv1: "srv1", fzSrv2: "srv2", fzExt: "external", fzVIP: "external"}
	fzOpen      = map[uint16]bool{80: true, 8080: true}
	fzNodeLocal = []netip.Addr{fzGateway, mustAddr("127.0.0.1"), fzNode} // sorted
	// fzIfaceAddrs: the node's interfaces' addresses (MASQUERADE's choice). Loopback
	// has only host-scope addresses, so for a packet leaving by lo the kernel's
	// inet_select_addr takes the first universe-scope address of any interface in
	// ifindex order: eth0's (ifindex 2; the kernel test checks it).
	fzIfaceAddrs = map[string]netip.Addr{"veth0": fzGateway, "veth1": fzGateway, "veth2": fzGateway, "eth0": fzNode, "lo": fzNode}
	// fzSources: where a packet can come from, and its source addresses.
	fzSources = map[string][]netip.Addr{"client": {fzClient}, "external": {fzExt}, "node": {fzNode, fzGateway}}
	fzInIface = map[string]string{"client": "veth0", "external": "eth0"}
)

// fzRoute is the node's routing table: a pod /32 by its veth, anything else by eth0.
func fzRoute(dst netip.Addr) string {
	switch dst {
	case fzClient:
		return "veth0"
	case fzSrv1:
		return "veth1"
	case fzSrv2:
		return "veth2"
	}
	return "eth0"
}

// fzPacket is the first packet of a connection: a TCP SYN or a UDP datagram.
type fzPacket struct {
	Proto    string // "tcp" or "udp"
	From     string // "client", "external" or "node"
	Src, Dst netip.AddrPort
}

func (p fzPacket) String() string {
	return fmt.Sprintf("%s from %s %s -> %s", p.Proto, p.From, p.Src, p.Dst)
}

func parseFzPacket(s string) (fzPacket, error) {
	f := strings.Fields(s)
	if len(f) != 6 || f[1] != "from" || f[4] != "->" || (f[0] != "tcp" && f[0] != "udp") || fzSources[f[2]] == nil {
		return fzPacket{}, fmt.Errorf("packet %q: want \"tcp|udp from client|external|node SRC:PORT -> DST:PORT\"", s)
	}
	src, err := netip.ParseAddrPort(f[3])
	if err != nil {
		return fzPacket{}, fmt.Errorf("packet %q: source: %w", s, err)
	}
	dst, err := netip.ParseAddrPort(f[5])
	if err != nil {
		return fzPacket{}, fmt.Errorf("packet %q: destination: %w", s, err)
	}
	return fzPacket{Proto: f[0], From: f[2], Src: src, Dst: dst}, nil
}

// fzGuard goes first in filter's built-in chains: packets of the connection after its
// first (replies, the handshake's ACK, the ICMP errors and resets REJECT sends, which
// are RELATED) pass, so that the generated rules decide the first packet only, which
// is what the emulator's walk follows. A first packet is NEW, so the guard never
// matches it.
const fzGuard = "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"

// Rules are drawn from these parts. Chains: filter F1, F2 (jumped to from any filter
// chain); nat D1, D2 (from PREROUTING and OUTPUT, where DNAT is allowed) and S1 (from
// POSTROUTING, where SNAT and MASQUERADE are). A chain jumps only to a later one, so
// there are no loops.
var (
	fzAddrs     = []netip.Addr{fzClient, fzSrv1, fzSrv2, fzNode, fzGateway, fzExt, fzVIP}
	fzPorts     = []uint16{80, 8080, 9090}
	fzSrcPorts  = []uint16{1111, 2222, 3333}
	fzPrefixes  = []int{32, 24, 16, 16, 8, 0}
	fzDNATAddrs = []netip.Addr{fzSrv1, fzSrv2, fzNode}
	fzSNATAddrs = []netip.Addr{fzNode, fzGateway}
	fzRejects   = []string{"", "icmp-port-unreachable", "icmp-host-unreachable", "icmp-net-unreachable",
		"icmp-proto-unreachable", "icmp-admin-prohibited", "icmp-host-prohibited", "icmp-net-prohibited", "tcp-reset"}
	fzCtStates = []string{"NEW", "ESTABLISHED", "NEW,ESTABLISHED", "RELATED", "DNAT", "SNAT", "INVALID", "UNTRACKED"}
)

// fzChain is where a rule goes: its table and chain, and which targets it may use.
type fzChain struct {
	table, name string
	builtin     bool
	targets     []string // target kinds
	jumps       []string // chains it may jump to
}

func fzChains() []fzChain {
	filterT := []string{"ACCEPT", "DROP", "REJECT", "MARK", "none"}
	return []fzChain{
		{"filter", "INPUT", true, filterT, []string{"F1", "F2"}},
		{"filter", "FORWARD", true, filterT, []string{"F1", "F2"}},
		{"filter", "OUTPUT", true, filterT, []string{"F1", "F2"}},
		{"filter", "F1", false, append([]string{"RETURN"}, filterT...), []string{"F2"}},
		{"filter", "F2", false, append([]string{"RETURN"}, filterT...), nil},
		// NAT targets are listed twice: drawn more often.
		{"nat", "PREROUTING", true, []string{"ACCEPT", "DNAT", "DNAT", "MARK", "none"}, []string{"D1", "D2"}},
		{"nat", "OUTPUT", true, []string{"ACCEPT", "DNAT", "DNAT", "MARK", "none"}, []string{"D1", "D2"}},
		{"nat", "INPUT", true, []string{"ACCEPT", "SNAT", "SNAT", "MARK", "none"}, nil},
		{"nat", "POSTROUTING", true, []string{"ACCEPT", "SNAT", "MASQUERADE", "MARK", "none"}, []string{"S1"}},
		{"nat", "D1", false, []string{"RETURN", "ACCEPT", "DNAT", "DNAT", "MARK", "none"}, []string{"D2"}},
		{"nat", "D2", false, []string{"RETURN", "ACCEPT", "DNAT", "DNAT", "MARK", "none"}, nil},
		{"nat", "S1", false, []string{"RETURN", "ACCEPT", "SNAT", "MASQUERADE", "MARK", "none"}, nil},
	}
}

func drawOf[V any](t *rapid.T, label string, vs []V) V {
	return vs[rapid.IntRange(0, len(vs)-1).Draw(t, label)]
}

// fzMaybe is true one time in n, false when shrunk.
func fzMaybe(t *rapid.T, label string, n int) bool {
	return rapid.IntRange(0, n-1).Draw(t, label) == n-1
}

func fzNeg(t *rapid.T) string {
	if fzMaybe(t, "neg", 4) {
		return "! "
	}
	return ""
}

// genFzRule draws one rule's text (after "-A CHAIN"). Its addresses, protocol and
// ports lean towards the packet's, so that rules match it often enough.
func genFzRule(t *rapid.T, c fzChain, p fzPacket) string {
	var b []string
	if fzMaybe(t, "has-s", 4) {
		b = append(b, fzAddrMatch(t, "-s", p))
	}
	if fzMaybe(t, "has-d", 3) {
		b = append(b, fzAddrMatch(t, "-d", p))
	}
	if in, out := fzIfaceOpts(c); fzMaybe(t, "has-iface", 5) && (in || out) {
		opt := "-i"
		if !in || out && rapid.Bool().Draw(t, "iface-out") {
			opt = "-o"
		}
		b = append(b, fzNeg(t)+opt+" "+drawOf(t, "iface", []string{"veth0", "veth1", "eth0", "lo", "veth+"}))
	}
	proto := drawOf(t, "proto", []string{"", "tcp", "udp", p.Proto, p.Proto})
	if proto != "" {
		b = append(b, "-p "+proto)
		switch rapid.IntRange(0, 5).Draw(t, "ports") {
		case 1:
			b = append(b, "-m "+proto+" "+fzNeg(t)+"--dport "+fzPortSpec(t, proto, p))
		case 2:
			b = append(b, "-m "+proto+" "+fzNeg(t)+"--sport "+fzPortSpec(t, proto, p))
		case 4:
			if proto == "tcp" {
				b = append(b, "-m tcp "+fzNeg(t)+drawOf(t, "tcp-flags", []string{"--syn", "--tcp-flags SYN,ACK SYN", "--tcp-flags SYN,RST,ACK,FIN SYN,ACK", "--tcp-flags ALL NONE", "--tcp-flags FIN,SYN FIN,SYN"}))
			}
		case 3:
			opt := drawOf(t, "mp-opt", []string{"--dports", "--sports", "--ports"})
			var ps []string
			for i, n := 0, rapid.IntRange(1, 3).Draw(t, "mp-n"); i < n; i++ {
				ps = append(ps, fzPortSpec(t, "multiport", p))
			}
			b = append(b, "-m multiport "+fzNeg(t)+opt+" "+strings.Join(ps, ","))
		}
	}
	if fzMaybe(t, "has-iprange", 8) {
		lo := drawOf(t, "iprange-lo", append(slices.Clone(fzAddrs), p.Src.Addr(), p.Dst.Addr()))
		hi := drawOf(t, "iprange-hi", append(slices.Clone(fzAddrs), p.Src.Addr(), p.Dst.Addr()))
		if hi.Less(lo) {
			lo, hi = hi, lo
		}
		b = append(b, "-m iprange "+fzNeg(t)+drawOf(t, "iprange-opt", []string{"--src-range ", "--dst-range "})+lo.String()+"-"+hi.String())
	}
	if fzMaybe(t, "has-addrtype", 6) {
		opt := drawOf(t, "at-opt", []string{"--dst-type", "--src-type"})
		b = append(b, "-m addrtype "+fzNeg(t)+opt+" "+drawOf(t, "at-type", []string{"LOCAL", "UNICAST", "LOCAL,UNICAST"}))
	}
	if fzMaybe(t, "has-mark", 6) {
		b = append(b, "-m mark "+fzNeg(t)+"--mark "+drawOf(t, "mark", []string{"0x1/0x1", "0x2/0x2", "0x0/0x1", "0x3"}))
	}
	if fzMaybe(t, "has-ct", 6) {
		b = append(b, "-m conntrack "+fzNeg(t)+"--ctstate "+drawOf(t, "ctstate", fzCtStates))
	}
	if fzMaybe(t, "has-comment", 8) {
		b = append(b, `-m comment --comment "`+drawOf(t, "comment", []string{"a rule", "x", "svc/port: 80"})+`"`)
	}
	targets := c.targets
	if len(c.jumps) > 0 {
		targets = append(slices.Clone(targets), "jump", "goto")
	}
	switch tk := drawOf(t, "target", targets); tk {
	case "none":
	case "ACCEPT", "DROP", "RETURN":
		b = append(b, "-j "+tk)
	case "jump", "goto":
		b = append(b, "-"+tk[:1]+" "+drawOf(t, "chain", c.jumps))
	case "MARK":
		b = append(b, "-j MARK --set-xmark "+drawOf(t, "set-mark", []string{"0x1/0x1", "0x2/0x2", "0x0/0x1", "0x3/0xffffffff"}))
	case "REJECT":
		w := drawOf(t, "reject-with", fzRejects)
		if w == "tcp-reset" && proto != "tcp" {
			w = ""
		}
		if w != "" {
			w = " --reject-with " + w
		}
		b = append(b, "-j REJECT"+w)
	case "DNAT":
		to := drawOf(t, "dnat-addr", fzDNATAddrs).String()
		if proto != "" && rapid.Bool().Draw(t, "dnat-port") {
			to += fmt.Sprintf(":%d", drawOf(t, "dnat-to-port", fzPorts))
		}
		b = append(b, "-j DNAT --to-destination "+to)
	case "SNAT":
		b = append(b, "-j SNAT --to-source "+drawOf(t, "snat-addr", fzSNATAddrs).String())
	case "MASQUERADE":
		b = append(b, "-j MASQUERADE")
	}
	return strings.Join(b, " ")
}

// fzAddrMatch draws -s or -d with a prefix, maybe negated. Not a negated /0:
// iptables-nft refuses it (testdata/difffuzz/negated-zero-prefix.case).
func fzAddrMatch(t *rapid.T, opt string, pkt fzPacket) string {
	addrs := append(slices.Clone(fzAddrs), pkt.Src.Addr(), pkt.Dst.Addr())
	p, _ := drawOf(t, opt+"addr", addrs).Prefix(drawOf(t, opt+"bits", fzPrefixes))
	neg := fzNeg(t)
	if p.Bits() == 0 {
		neg = ""
	}
	return neg + opt + " " + p.String()
}

// fzIfaceOpts says whether a chain's rules may use -i and -o: iptables refuses -o in
// INPUT and PREROUTING and -i in OUTPUT and POSTROUTING; a user chain takes both (the
// interface a hook lacks is empty: -i veth0 never matches there, ! -i veth0 always).
func fzIfaceOpts(c fzChain) (in, out bool) {
	switch c.name {
	case "INPUT", "PREROUTING":
		return true, false
	case "OUTPUT", "POSTROUTING":
		return false, true
	}
	return true, true
}

// fzPortSpec is a port or a range around the ports packets use, valid for the
// module: -m tcp wants the start at most the end, multiport below it, and -m udp takes
// a reversed range (which never matches).
func fzPortSpec(t *rapid.T, module string, pkt fzPacket) string {
	all := append(slices.Clone(fzPorts), append(fzSrcPorts, pkt.Src.Port(), pkt.Dst.Port())...)
	p := drawOf(t, "port", all)
	if fzMaybe(t, "range", 4) {
		q := drawOf(t, "port-max", all)
		if q < p && module != "udp" || q == p && module == "multiport" {
			p, q = min(p, q), max(p, q)+1
		}
		return fmt.Sprintf("%d:%d", p, q)
	}
	return fmt.Sprint(p)
}

// genFzRuleset draws a ruleset for the packet as iptables-restore text: filter and
// nat, every chain declared (user chains only when used), a few rules per chain, the
// filter guard first.
func genFzRuleset(t *rapid.T, p fzPacket) string {
	rules := map[string][]string{}
	used := map[string]bool{}
	for _, c := range fzChains() {
		drawn := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) string { return genFzRule(t, c, p) }), 0, 3).Draw(t, "rules-"+c.name)
		for _, r := range drawn {
			rules[c.table+"/"+c.name] = append(rules[c.table+"/"+c.name], r)
			for _, j := range c.jumps {
				if strings.HasSuffix(r, " "+j) {
					used[j] = true
				}
			}
		}
	}
	var b strings.Builder
	for _, table := range []string{"filter", "nat"} {
		fmt.Fprintf(&b, "*%s\n", table)
		for _, c := range fzChains() {
			if c.table != table {
				continue
			}
			if c.builtin {
				policy := "ACCEPT"
				if table == "filter" && fzMaybe(t, "policy-"+c.name, 4) {
					policy = "DROP"
				}
				fmt.Fprintf(&b, ":%s %s [0:0]\n", c.name, policy)
			} else if used[c.name] || len(rules[table+"/"+c.name]) > 0 {
				fmt.Fprintf(&b, ":%s - [0:0]\n", c.name)
			}
		}
		for _, c := range fzChains() {
			if c.table != table {
				continue
			}
			if table == "filter" && c.builtin {
				fmt.Fprintf(&b, "-A %s %s\n", c.name, fzGuard)
			}
			for _, r := range rules[table+"/"+c.name] {
				fmt.Fprintf(&b, "-A %s %s\n", c.name, strings.TrimSpace(r))
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// genFzPacket draws a packet: a source namespace and address, a destination that is
// not the source's own.
func genFzPacket(t *rapid.T) fzPacket {
	from := drawOf(t, "from", []string{"client", "external", "node"})
	src := drawOf(t, "src", fzSources[from])
	var dsts []netip.Addr
	for _, a := range fzAddrs {
		if fzOwner[a] != from {
			dsts = append(dsts, a)
		}
	}
	if from == "node" {
		dsts = append(dsts, fzNode) // the node to itself, over loopback
	}
	return fzPacket{Proto: drawOf(t, "pkt-proto", []string{"tcp", "udp"}), From: from,
		Src: netip.AddrPortFrom(src, drawOf(t, "sport", fzSrcPorts)),
		Dst: netip.AddrPortFrom(drawOf(t, "dst", dsts), drawOf(t, "dport", fzPorts))}
}

// fzWalk walks the packet through the emulator loaded with the ruleset.
func fzWalk(ruleset string, p fzPacket) (*Outcome, error) {
	emu := New(IPv4)
	if err := emu.RestoreText([]byte(ruleset), RestoreOptions{File: "ruleset"}); err != nil {
		return nil, err
	}
	pkt := Packet{Src: p.Src.Addr(), Dst: p.Dst.Addr(), SrcPort: p.Src.Port(), DstPort: p.Dst.Port(),
		TTL: 64, Len: 60, InIface: fzInIface[p.From]}
	if p.Proto == "tcp" {
		pkt.Proto, pkt.TCPFlags = netfilter.ProtoTCP, netfilter.TCPSyn
	} else {
		pkt.Proto = netfilter.ProtoUDP
	}
	from := map[string]From{"client": FromPod, "external": FromExternal, "node": FromNode}[p.From]
	r, err := emu.Walk(WalkInput{Packet: pkt, From: from, Local: fzNodeLocal, IfaceAddrs: fzIfaceAddrs, Route: fzRoute})
	if err != nil {
		return nil, err
	}
	return r.Outcomes[0], nil
}

// fzRejectSeen is what a client sees of a REJECT, by protocol and --reject-with. The
// TCP client reads ICMP errors as they come (IP_RECVERR); a connected UDP socket
// without IP_RECVERR reports only the ICMP errors the kernel deems hard
// (icmp_err_convert's fatal flag), so net and host unreachable are a timeout there.
var fzRejectSeen = map[string]map[string]string{
	"tcp": {"tcp-reset": "refused", "icmp-port-unreachable": "refused", "icmp-net-unreachable": "unreachable",
		"icmp-host-unreachable": "unreachable", "icmp-proto-unreachable": "failed ENOPROTOOPT",
		"icmp-net-prohibited": "unreachable", "icmp-host-prohibited": "unreachable", "icmp-admin-prohibited": "unreachable"},
	"udp": {"icmp-port-unreachable": "refused", "icmp-net-unreachable": "timeout",
		"icmp-host-unreachable": "timeout", "icmp-proto-unreachable": "failed ENOPROTOOPT",
		"icmp-net-prohibited": "unreachable", "icmp-host-prohibited": "unreachable", "icmp-admin-prohibited": "unreachable"},
}

// fzExpect is what the client should see, by the emulator's outcome: the observation
// in the form fzObserved gives the kernel's.
func fzExpect(o *Outcome, p fzPacket) string {
	outputHook := o.Decision != nil && o.Decision.Hook == "OUTPUT"
	switch o.Verdict {
	case "ACCEPT", "LOCAL":
		dst := p.Dst
		if o.DNATDestination != nil {
			if ap, err := netip.ParseAddrPort(*o.DNATDestination); err == nil {
				dst = ap
			} else if a, err := netip.ParseAddr(*o.DNATDestination); err == nil {
				dst = netip.AddrPortFrom(a, dst.Port())
			} else {
				return "emulator DNAT destination " + *o.DNATDestination + "?"
			}
		}
		owner := fzOwner[dst.Addr()]
		if owner == "" {
			return "no owner for " + dst.Addr().String()
		}
		if !fzOpen[dst.Port()] {
			return "refused"
		}
		src := p.Src.Addr()
		if o.Masqueraded {
			if o.SNATSource == nil {
				return "answered " + owner + " from the masquerade address (unknown)"
			}
			ap, err := netip.ParseAddrPort(*o.SNATSource)
			if err != nil {
				a, err2 := netip.ParseAddr(*o.SNATSource)
				if err2 != nil {
					return "emulator SNAT source " + *o.SNATSource + "?"
				}
				ap = netip.AddrPortFrom(a, 0)
			}
			src = ap.Addr()
		}
		return "answered " + owner + " from " + src.String()
	case "DROP":
		if p.From == "node" && outputHook && p.Proto == "udp" {
			// The node's own datagram dropped at OUTPUT: the send fails with EPERM.
			// (TCP's connect ignores the error of its SYN's transmission and waits.)
			return "eperm"
		}
		return "timeout"
	case "REJECT":
		if p.From == "node" && outputHook && p.Proto == "udp" {
			return "eperm"
		}
		w := o.RejectWith
		if w == "" {
			w = "icmp-port-unreachable"
		}
		if s, ok := fzRejectSeen[p.Proto][w]; ok {
			return s
		}
		return "reject " + w + "?"
	}
	return "verdict " + o.Verdict + "?"
}

// fzCase is one differential case as a regression file holds it.
type fzCase struct {
	Comment  []string // "# ..." lines: what was found and why
	Packet   fzPacket
	Kernel   string // what the kernel showed
	Emulator string // what the emulator predicted
	// Expect is "same" (the emulator must predict what the kernel showed: a fixed
	// difference) or "differ: REASON" (a known difference the emulator keeps).
	Expect string
	// Backend, when set, is the only iptables backend ("nft" or "legacy") whose kernel
	// shows Kernel: the kernel replay skips the case under the other.
	Backend string
	Ruleset string
}

func (c *fzCase) Format() []byte {
	var b bytes.Buffer
	for _, l := range c.Comment {
		fmt.Fprintf(&b, "# %s\n", l)
	}
	fmt.Fprintf(&b, "packet: %s\nkernel: %s\nemulator: %s\nexpect: %s\n", c.Packet, c.Kernel, c.Emulator, c.Expect)
	if c.Backend != "" {
		fmt.Fprintf(&b, "backend: %s\n", c.Backend)
	}
	fmt.Fprintf(&b, "ruleset:\n%s", c.Ruleset)
	return b.Bytes()
}

func parseFzCase(name string, data []byte) (*fzCase, error) {
	c := &fzCase{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0
	seen := map[string]bool{}
	for sc.Scan() {
		line++
		l := sc.Text()
		if rest, ok := strings.CutPrefix(l, "#"); ok {
			c.Comment = append(c.Comment, strings.TrimSpace(rest))
			continue
		}
		key, val, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: %q: want KEY: VALUE (packet, kernel, emulator, expect, backend, ruleset)", name, line, l)
		}
		val = strings.TrimSpace(val)
		if seen[key] {
			return nil, fmt.Errorf("%s:%d: %s given twice", name, line, key)
		}
		seen[key] = true
		switch key {
		case "packet":
			p, err := parseFzPacket(val)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, line, err)
			}
			c.Packet = p
		case "kernel":
			c.Kernel = val
		case "emulator":
			c.Emulator = val
		case "expect":
			if val != "same" && !strings.HasPrefix(val, "differ: ") {
				return nil, fmt.Errorf("%s:%d: expect %q: want \"same\" or \"differ: REASON\"", name, line, val)
			}
			c.Expect = val
		case "backend":
			if val != "nft" && val != "legacy" {
				return nil, fmt.Errorf("%s:%d: backend %q: want nft or legacy", name, line, val)
			}
			c.Backend = val
		case "ruleset":
			var rs strings.Builder
			for sc.Scan() {
				rs.WriteString(sc.Text() + "\n")
			}
			c.Ruleset = rs.String()
		default:
			return nil, fmt.Errorf("%s:%d: unknown key %q (want packet, kernel, emulator, expect, backend, ruleset)", name, line, key)
		}
	}
	for _, k := range []string{"packet", "kernel", "emulator", "expect", "ruleset"} {
		if !seen[k] {
			return nil, fmt.Errorf("%s: no %s", name, k)
		}
	}
	return c, sc.Err()
}

const fzCaseDir = "testdata/difffuzz"

func loadFzCases(t *testing.T) map[string]*fzCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(fzCaseDir, "*.case"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*fzCase{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := parseFzCase(f, data)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = c
	}
	return out
}

// checkFzCase holds the emulator to a regression case: for "same", its prediction is
// the kernel's observation; for "differ", it is the emulator's recorded one and not the
// kernel's.
func checkFzCase(c *fzCase) error {
	got := "load error"
	o, err := fzWalk(c.Ruleset, c.Packet)
	if err == nil {
		got = fzExpect(o, c.Packet)
	}
	switch {
	case c.Expect == "same" && got != c.Kernel:
		return fmt.Errorf("emulator predicts %q, the kernel showed %q", got, c.Kernel)
	case c.Expect != "same" && got != c.Emulator:
		return fmt.Errorf("emulator predicts %q, the case recorded %q (%s)", got, c.Emulator, c.Expect)
	}
	return nil
}

// TestDiffFuzzRegressions replays every case the differential fuzzer kept under
// testdata/difffuzz through the emulator (no root needed); TestKernelDiffFuzz replays
// them through the kernel too.
func TestDiffFuzzRegressions(t *testing.T) {
	cases := loadFzCases(t)
	if len(cases) == 0 {
		t.Fatalf("no cases under %s", fzCaseDir)
	}
	for f, c := range cases {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if err := checkFzCase(c); err != nil {
				t.Errorf("%s: %s: %v", f, c.Packet, err)
			}
		})
	}
}

// TestDiffFuzzCaseFormat: a case survives Format and parse, and bad files are errors
// naming the file and line.
func TestDiffFuzzCaseFormat(t *testing.T) {
	c := &fzCase{Comment: []string{"why"}, Packet: fzPacket{Proto: "udp", From: "node", Src: netip.MustParseAddrPort("192.168.77.1:1111"),
		Dst: netip.MustParseAddrPort("10.244.0.3:80")}, Kernel: "timeout", Emulator: "answered srv1 from 192.168.77.1", Expect: "differ: a reason",
		Backend: "legacy", Ruleset: "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"}
	got, err := parseFzCase("x.case", c.Format())
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Format()) != string(c.Format()) {
		t.Errorf("round trip:\n%s\nwant\n%s", got.Format(), c.Format())
	}
	for _, bad := range []struct{ text, want string }{
		{"packet: tcp from nowhere 1.2.3.4:1 -> 1.2.3.4:2\n", "x.case:1: packet"},
		{"packet: tcp from node 1.2.3.4:1 -> 1.2.3.4:2\nexpect: maybe\n", "x.case:2: expect \"maybe\""},
		{"nonsense\n", "x.case:1:"},
		{"kernel: timeout\n", "x.case: no packet"},
	} {
		if _, err := parseFzCase("x.case", []byte(bad.text)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: error %v, want one containing %q", bad.text, err, bad.want)
		}
	}
}

// TestDiffFuzzGeneratorLoads: every drawn ruleset loads into the emulator, and every
// drawn packet walks (the kernel test relies on both; rejections there are findings).
func TestDiffFuzzGeneratorLoads(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genFzPacket(t)
		rs := genFzRuleset(t, p)
		o, err := fzWalk(rs, p)
		if err != nil {
			t.Fatalf("%v\n%s", err, rs)
		}
		if e := fzExpect(o, p); strings.HasSuffix(e, "?") || strings.HasPrefix(e, "no owner") {
			t.Fatalf("no prediction for %s: %s\n%s", p, e, rs)
		}
	})
}
