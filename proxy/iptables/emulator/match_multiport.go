package emulator

import (
	"fmt"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// The multiport match module.

// MultiportMatch is -m multiport --sports/--dports/--ports LIST.
type MultiportMatch struct {
	Which string // "--sports", "--dports" or "--ports"
	Ports []PortRange
	Neg   bool
}

// Module implements Match.
func (*MultiportMatch) Module() string { return "multiport" }

func (m *MultiportMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if m.Which != "" {
		return fmt.Errorf("multiport takes only one of --sports, --dports, --ports")
	}
	m.Which, m.Neg = opt, neg
	slots := 0
	for _, part := range strings.Split(args[0].val, ",") {
		r, err := parseMultiportRange(part)
		if err != nil {
			return err
		}
		if strings.Contains(part, ":") {
			slots += 2
		} else {
			slots++
		}
		m.Ports = append(m.Ports, r)
	}
	if slots > 15 {
		return fmt.Errorf("too many ports specified (at most 15, a range counts as two)")
	}
	return nil
}

func (m *MultiportMatch) finish(rc *ruleCtx) error {
	if m.Which == "" {
		return fmt.Errorf("-m multiport needs --sports, --dports or --ports")
	}
	return needProto(rc, "-m multiport", netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoUDPLite, netfilter.ProtoSCTP, netfilter.ProtoDCCP)
}

func (m *MultiportMatch) appendArgs(b []byte) []byte {
	b = appendNeg(b, m.Neg)
	b = append(b, ' ')
	b = append(b, m.Which...)
	b = append(b, ' ')
	for i, r := range m.Ports {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendPortRange(b, r)
	}
	return b
}

func (m *MultiportMatch) eval(c *evalCtx) tri {
	p := c.pkt
	if !p.hasPorts() {
		return no
	}
	hit := false
	for _, r := range m.Ports {
		switch m.Which {
		case "--sports":
			hit = r.contains(p.SrcPort)
		case "--dports":
			hit = r.contains(p.DstPort)
		default:
			hit = r.contains(p.SrcPort) || r.contains(p.DstPort)
		}
		if hit {
			break
		}
	}
	return triOf(hit != m.Neg)
}
