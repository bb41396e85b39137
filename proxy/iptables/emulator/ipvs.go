package emulator

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// This file is -m ipvs (xt_ipvs): whether a packet belongs to an IPVS connection, and
// that connection's virtual address, port, protocol, forwarding method and
// controlling connection. The rule keeps its options as written (it stays an
// UnknownMatch for printing: xt_ipvs's iptables-save spelling could not be checked on
// the reference kernel, which has no IPVS); the evaluator reads them from an ipvsSpec.
// IPVS state comes from outside the emulator, through SetIPVSLookup (kube-proxy's IPVS
// mode on netsim installs one); without a lookup the match stays undecidable, as every
// unknown module is.

// IPVS forwarding methods (IP_VS_CONN_F_FWD_MASK values), for IPVSConn.Method.
const (
	IPVSMasq   uint8 = 0
	IPVSLocal  uint8 = 1
	IPVSTunnel uint8 = 2
	IPVSDRoute uint8 = 3
)

// IPVSConn is what xt_ipvs reads from the IPVS connection entry a packet belongs to.
type IPVSConn struct {
	VAddr netip.Addr // the virtual address (for fwmark services: the packet's original destination)
	VPort uint16
	// Method is the forwarding method: IPVSMasq, IPVSLocal, IPVSTunnel or IPVSDRoute.
	Method uint8
	// Control is set when the entry is controlled by another (an FTP data connection by
	// its control connection); ControlVPort is the controller's virtual port.
	Control      bool
	ControlVPort uint16
}

// IPVSLookup reports, for a packet at a hook and table, whether it carries IPVS's mark
// (skb->ipvs_property: IPVS has handled it by then) and, if so, its connection entry;
// nil means not an IPVS packet.
type IPVSLookup func(p *Packet, hook netfilter.Hook, table string) *IPVSConn

// SetIPVSLookup gives -m ipvs rules the IPVS state they match on; nil makes them
// undecidable again.
func (e *Emulator) SetIPVSLookup(f IPVSLookup) {
	e.mu.Lock()
	e.st.ipvs = f
	e.gen++
	e.mu.Unlock()
}

// xt_ipvs option bits (XT_IPVS_*).
const (
	xtIPVSProperty uint8 = 1 << iota
	xtIPVSProto
	xtIPVSVAddr
	xtIPVSVPort
	xtIPVSDir
	xtIPVSMethod
	xtIPVSVPortCtl
)

// ipvsSpec is struct xt_ipvs_mtinfo.
type ipvsSpec struct {
	bitmask, invert uint8
	proto           uint8
	vaddr, vmask    netip.Addr
	vport, vportctl uint16
	method          uint8
}

// parseIPVS reads -m ipvs options as libxt_ipvs does (ipvs_mt_parse, ipvs_mt_check).
func parseIPVS(args []string, f Family) (*ipvsSpec, error) {
	s := &ipvsSpec{}
	neg := false
	seen := map[uint8]bool{}
	for i := 0; i < len(args); i++ {
		a := strings.Trim(args[i], `"`)
		if a == "!" {
			neg = true
			continue
		}
		bit, nargs, negOK := uint8(0), 1, true
		switch a {
		case "--ipvs":
			bit, nargs = xtIPVSProperty, 0
		case "--vproto", "--proto":
			// libxt_ipvs's save function prints --vproto as "--proto N"; both test
			// the packet's protocol.
			bit = xtIPVSProto
		case "--vaddr":
			bit = xtIPVSVAddr
		case "--vport":
			bit = xtIPVSVPort
		case "--vdir":
			bit, negOK = xtIPVSDir, false
		case "--vmethod":
			bit = xtIPVSMethod
		case "--vportctl":
			bit = xtIPVSVPortCtl
		default:
			return nil, fmt.Errorf("-m ipvs: unknown option %q", a)
		}
		if seen[bit] {
			return nil, fmt.Errorf("-m ipvs: %s given twice", a)
		}
		seen[bit] = true
		if neg && !negOK {
			return nil, fmt.Errorf("-m ipvs: %s cannot be negated", a)
		}
		if nargs > 0 && i+1 >= len(args) {
			return nil, fmt.Errorf("-m ipvs: %s needs an argument", a)
		}
		var v string
		if nargs > 0 {
			i++
			v = strings.Trim(args[i], `"`)
		}
		var err error
		switch bit {
		case xtIPVSProto:
			s.proto, err = ParseProto(v)
		case xtIPVSVAddr:
			err = s.parseVAddr(v, f)
		case xtIPVSVPort:
			s.vport, err = parsePort(v)
		case xtIPVSVPortCtl:
			s.vportctl, err = parsePort(v)
		case xtIPVSDir:
			switch strings.ToUpper(v) {
			case "ORIGINAL":
			case "REPLY":
				s.invert |= xtIPVSDir
			default:
				err = fmt.Errorf("bad --vdir %q (want ORIGINAL or REPLY)", v)
			}
		case xtIPVSMethod:
			switch strings.ToUpper(v) {
			case "GATE":
				s.method = IPVSDRoute
			case "IPIP":
				s.method = IPVSTunnel
			case "MASQ":
				s.method = IPVSMasq
			default:
				err = fmt.Errorf("bad --vmethod %q (want GATE, IPIP or MASQ)", v)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("-m ipvs %s: %w", a, err)
		}
		s.bitmask |= bit
		if neg {
			s.invert |= bit
		}
		neg = false
	}
	if neg {
		return nil, fmt.Errorf("-m ipvs: nothing follows !")
	}
	if s.bitmask == 0 {
		return nil, fmt.Errorf("-m ipvs: at least one option is required")
	}
	if s.bitmask&^xtIPVSProperty != 0 {
		if s.invert&xtIPVSProperty != 0 {
			return nil, fmt.Errorf("-m ipvs: ! --ipvs cannot be together with other options")
		}
		s.bitmask |= xtIPVSProperty
	}
	return s, nil
}

// parseVAddr reads ADDR[/LEN or /MASK] (XTTYPE_HOSTMASK: the address is kept as given).
func (s *ipvsSpec) parseVAddr(v string, f Family) error {
	p, err := parsePrefix(v, f)
	if err != nil {
		return err
	}
	as, _, _ := strings.Cut(v, "/")
	if as == "0" {
		as = "0.0.0.0"
	}
	a, err := netip.ParseAddr(as)
	if err != nil {
		return err
	}
	if f == IPv4 {
		a = a.Unmap()
	}
	s.vaddr = a
	mask := fullMask(f).AsSlice()
	for i := range mask {
		left := p.Bits() - 8*i
		switch {
		case left >= 8:
		case left <= 0:
			mask[i] = 0
		default:
			mask[i] = byte(0xff << (8 - left))
		}
	}
	s.vmask, _ = netip.AddrFromSlice(mask)
	return nil
}

// eval is ipvs_mt().
func (s *ipvsSpec) eval(c *evalCtx) tri {
	if c.st.ipvs == nil {
		return unknown
	}
	cp := c.st.ipvs(c.pkt, c.hook, c.table)
	if s.bitmask == xtIPVSProperty {
		return triOf((cp != nil) != (s.invert&xtIPVSProperty != 0))
	}
	if cp == nil {
		return no
	}
	// want: the condition must equal "not inverted".
	want := func(bit uint8, cond bool) bool { return s.bitmask&bit == 0 || cond != (s.invert&bit != 0) }
	p := c.pkt
	ok := want(xtIPVSProto, p.Proto == s.proto) &&
		want(xtIPVSVPort, cp.VPort == s.vport) &&
		want(xtIPVSVPortCtl, cp.Control && cp.ControlVPort == s.vportctl) &&
		want(xtIPVSMethod, cp.Method == s.method) &&
		want(xtIPVSVAddr, cp.VAddr.IsValid() && maskAddr(cp.VAddr, s.vmask) == maskAddr(s.vaddr, s.vmask))
	if ok && s.bitmask&xtIPVSDir != 0 {
		// XT_IPVS_DIR needs a conntrack entry; ORIGINAL matches the original direction.
		if !hasCT(p) {
			ok = false
		} else {
			ok = p.CT.Reply == (s.invert&xtIPVSDir != 0)
		}
	}
	return triOf(ok)
}
