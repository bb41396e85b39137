package emulator

import (
	"fmt"
	"net/netip"
	"strings"
)

// The iprange match module.

// AddrRange is an inclusive address range, negatable.
type AddrRange struct {
	From, To netip.Addr
	Neg      bool
}

// IPRangeMatch is -m iprange.
type IPRangeMatch struct{ Src, Dst *AddrRange }

// Module implements Match.
func (*IPRangeMatch) Module() string { return "iprange" }

func (m *IPRangeMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	fs, ts, ok := strings.Cut(args[0].val, "-")
	if !ok {
		ts = fs
	}
	from, err1 := netip.ParseAddr(fs)
	to, err2 := netip.ParseAddr(ts)
	if err1 != nil || err2 != nil || FamilyOf(from) != rc.family || FamilyOf(to) != rc.family || !addrLE(from, to) {
		return fmt.Errorf("invalid %s range %q", rc.family, args[0].val)
	}
	r := &AddrRange{from, to, neg}
	if opt == "--src-range" {
		m.Src = r
	} else {
		m.Dst = r
	}
	return nil
}

func (m *IPRangeMatch) finish(*ruleCtx) error {
	if m.Src == nil && m.Dst == nil {
		return fmt.Errorf("-m iprange needs --src-range or --dst-range")
	}
	return nil
}

func (m *IPRangeMatch) appendArgs(b []byte) []byte {
	for _, x := range []struct {
		opt string
		r   *AddrRange
	}{{" --src-range ", m.Src}, {" --dst-range ", m.Dst}} {
		if x.r == nil {
			continue
		}
		b = appendNeg(b, x.r.Neg)
		b = append(b, x.opt...)
		b = x.r.From.AppendTo(b)
		b = append(b, '-')
		b = x.r.To.AppendTo(b)
	}
	return b
}

func (m *IPRangeMatch) eval(c *evalCtx) tri {
	in := func(r *AddrRange, a netip.Addr) bool {
		return r == nil || (addrLE(r.From, a) && addrLE(a, r.To)) != r.Neg
	}
	return triOf(in(m.Src, c.pkt.Src) && in(m.Dst, c.pkt.Dst))
}
