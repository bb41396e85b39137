package emulator

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/netfilter"
)

// testByString is IPSet.test as it was before its key was built in a stack buffer: the
// reference TestIPSetTestMatchesReference compares it with.
func (set *IPSet) testByString(p *Packet, dirs []bool) setResult {
	if len(dirs) < len(set.dims) || FamilyOf(p.Dst) != set.Family {
		return setMiss
	}
	var key strings.Builder
	var addrs []netip.Addr
	var proto uint8
	var port uint16
	for i, d := range set.dims {
		if i > 0 {
			key.WriteByte(',')
		}
		switch d {
		case dimIP, dimNet:
			a := p.Src
			if dirs[i] {
				a = p.Dst
			}
			addrs = append(addrs, a)
			key.WriteString(a.String())
		case dimPort:
			if !p.hasPorts() {
				return setMiss
			}
			port = p.SrcPort
			if dirs[i] {
				port = p.DstPort
			}
			proto = p.Proto
			if set.Type == "bitmap:port" {
				key.WriteString(strconv.Itoa(int(port)))
			} else {
				key.WriteString(ProtoName(proto) + ":" + strconv.Itoa(int(port)))
			}
		}
	}
	if m, ok := set.members[key.String()]; ok {
		if m.nomatch {
			return setNomatch
		}
		return setHit
	}
	best, bestBits := setMiss, -1
	for _, m := range set.nets {
		if m.hasPort && (m.port != port || (m.proto != 0 && m.proto != proto)) {
			continue
		}
		ok, bits := true, 0
		for i, pr := range m.prefixes {
			if !pr.Contains(addrs[i]) {
				ok = false
				break
			}
			bits += pr.Bits()
		}
		if ok && bits > bestBits {
			bestBits = bits
			best = setHit
			if m.nomatch {
				best = setNomatch
			}
		}
	}
	return best
}

// TestIPSetTestMatchesReference: set lookups (every set type, IPv4 and IPv6, members
// with and without nomatch, networks, protocols and ports drawn from a few values so
// that packets hit them) give what the string-keyed reference gives, for packets of
// every protocol in both directions.
func TestIPSetTestMatchesReference(t *testing.T) {
	types := slices.Sorted(func(yield func(string) bool) {
		for k := range setTypes {
			if !yield(k) {
				return
			}
		}
	})
	rapid.Check(t, func(t *rapid.T) {
		fam := rapid.SampledFrom([]Family{IPv4, IPv6}).Draw(t, "family")
		typ := rapid.SampledFrom(types).Draw(t, "type")
		if typ == "bitmap:port" {
			fam = IPv4
		}
		addrs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.1.7"), netip.MustParseAddr("192.168.5.5")}
		if fam == IPv6 {
			addrs = []netip.Addr{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00:0:0:1::7"), netip.MustParseAddr("2001:db8::5")}
		}
		protos := []uint8{netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP, netfilter.ProtoICMP}
		ports := []uint16{53, 80, 443}
		famOpt := ""
		if fam == IPv6 {
			famOpt = " family inet6"
		}
		text := fmt.Sprintf("create S %s%s\n", typ, famOpt)
		for range rapid.IntRange(0, 8).Draw(t, "members") {
			var parts []string
			for _, d := range setTypes[typ] {
				switch d {
				case dimPort:
					port := strconv.Itoa(int(rapid.SampledFrom(ports).Draw(t, "port")))
					if typ != "bitmap:port" && rapid.Bool().Draw(t, "named") {
						port = rapid.SampledFrom([]string{"tcp", "udp", "sctp"}).Draw(t, "proto") + ":" + port
					}
					parts = append(parts, port)
				case dimIP:
					parts = append(parts, rapid.SampledFrom(addrs).Draw(t, "ip").String())
				case dimNet:
					a := rapid.SampledFrom(addrs).Draw(t, "net")
					bits := rapid.IntRange(a.BitLen()-24, a.BitLen()).Draw(t, "bits")
					parts = append(parts, netip.PrefixFrom(a, bits).Masked().String())
				}
			}
			line := "add S " + strings.Join(parts, ",")
			if rapid.IntRange(0, 4).Draw(t, "nomatch") == 0 {
				line += " nomatch"
			}
			text += line + "\n"
		}
		sets, err := ParseIPSetSave([]byte(text), "sets")
		if err != nil {
			t.Skip(err) // a member the type refuses (a network in an ip dimension, ...)
		}
		set := sets.Get("S")
		for range 20 {
			q := &Packet{Proto: rapid.SampledFrom(protos).Draw(t, "pproto"),
				Src: rapid.SampledFrom(addrs).Draw(t, "src"), Dst: rapid.SampledFrom(addrs).Draw(t, "dst"),
				SrcPort: rapid.SampledFrom(ports).Draw(t, "sport"), DstPort: rapid.SampledFrom(ports).Draw(t, "dport")}
			if q.Proto == netfilter.ProtoICMP {
				q.SrcPort, q.DstPort = 0, 0
			}
			dirs := make([]bool, len(set.dims))
			for i := range dirs {
				dirs[i] = rapid.Bool().Draw(t, "dir")
			}
			if got, want := set.test(q, dirs), set.testByString(q, dirs); got != want {
				t.Fatalf("set %s:\n%spacket %s dirs %v: %d, reference %d", typ, text, q, dirs, got, want)
			}
		}
	})
}
