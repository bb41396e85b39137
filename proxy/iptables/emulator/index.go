package emulator

import "net/netip"

// indexThreshold is the chain length from which the evaluator indexes a chain.
const indexThreshold = 16

// chainIndex lets the evaluator skip, in one lookup, the rules of a long chain that
// cannot match a packet, while keeping first-match order exactly.
//
// A rule is indexed by destination when it has a non-negated full-length -d (the
// kernel checks -d before any match module, so a rule with another destination is
// never looked at beyond that); otherwise by (protocol, destination port) when it has
// a non-negated -p and its protocol module's first --dport is a single non-negated port
// and only side-effect-free modules come before it. Every other rule is "rest" and is
// always a candidate. The candidates for a packet are byDst[dst] ∪ byPort[proto,dport]
// ∪ rest, each list ascending, merged in rule order.
type chainIndex struct {
	byDst  map[netip.Addr][]int32
	byPort map[portKey][]int32
	rest   []int32
}

type portKey struct {
	proto uint8
	port  uint16
}

func buildIndex(c *Chain) *chainIndex {
	idx := &chainIndex{byDst: make(map[netip.Addr][]int32), byPort: make(map[portKey][]int32)}
	for i, r := range c.Rules {
		if r.Dst.IsSet() && !r.Dst.Neg && r.Dst.Prefix.IsSingleIP() {
			a := r.Dst.Prefix.Addr()
			idx.byDst[a] = append(idx.byDst[a], int32(i))
			continue
		}
		if k, ok := portIndexKey(r); ok {
			idx.byPort[k] = append(idx.byPort[k], int32(i))
			continue
		}
		idx.rest = append(idx.rest, int32(i))
	}
	return idx
}

// portIndexKey returns the (protocol, port) a rule can only match, if it is indexable.
func portIndexKey(r *Rule) (portKey, bool) {
	if !r.Proto.Set || r.Proto.Neg {
		return portKey{}, false
	}
	for _, m := range r.Matches {
		var d *PortSpec
		switch m := m.(type) {
		case *TCPMatch:
			d = m.Dport
		case *UDPMatch:
			d = m.Dport
		case *SCTPMatch:
			d = m.Dport
		case *CommentMatch, *AddrTypeMatch, *MarkMatch, *ConntrackMatch, *StateMatch, *IPRangeMatch, *SetMatch, *UnknownMatch:
			// No side effects: skipping the rule skips nothing observable.
			continue
		default:
			return portKey{}, false
		}
		if d == nil || d.Neg || d.Min != d.Max {
			return portKey{}, false
		}
		return portKey{r.Proto.Num, d.Min}, true
	}
	return portKey{}, false
}

// candidates appends to buf the indexes of the rules that may match p, in order.
func (idx *chainIndex) candidates(p *Packet, buf []int32) []int32 {
	a := idx.byDst[p.Dst]
	var b []int32
	if p.hasPorts() && len(idx.byPort) > 0 {
		b = idx.byPort[portKey{p.Proto, p.DstPort}]
	}
	c := idx.rest
	for len(a)+len(b)+len(c) > 0 {
		m := int32(1<<31 - 1)
		if len(a) > 0 && a[0] < m {
			m = a[0]
		}
		if len(b) > 0 && b[0] < m {
			m = b[0]
		}
		if len(c) > 0 && c[0] < m {
			m = c[0]
		}
		buf = append(buf, m)
		switch {
		case len(a) > 0 && a[0] == m:
			a = a[1:]
		case len(b) > 0 && b[0] == m:
			b = b[1:]
		default:
			c = c[1:]
		}
	}
	return buf
}
