package emulator

import "fmt"

// The mark and connmark match modules.

// MarkMatch is -m mark --mark V[/M] (or -m connmark, with Conn): (mark & M) == V.
type MarkMatch struct {
	Conn        bool
	Value, Mask uint32
	Neg         bool
}

// Module implements Match.
func (m *MarkMatch) Module() string {
	if m.Conn {
		return "connmark"
	}
	return "mark"
}

func (m *MarkMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	v, mask, _, err := parseMarkMask(args[0].val)
	if err != nil {
		return err
	}
	m.Value, m.Mask, m.Neg = v&mask, mask, neg
	return nil
}

func (m *MarkMatch) finish(rc *ruleCtx) error {
	if !rc.has(m, "--mark") {
		return fmt.Errorf("-m %s needs --mark", m.Module())
	}
	return nil
}

func (m *MarkMatch) appendArgs(b []byte) []byte {
	b = appendNeg(b, m.Neg)
	b = append(b, " --mark "...)
	b = appendHex(b, m.Value)
	if m.Mask != 0xffffffff {
		b = append(b, '/')
		b = appendHex(b, m.Mask)
	}
	return b
}

func (m *MarkMatch) eval(c *evalCtx) tri {
	v := c.pkt.Mark
	if m.Conn {
		if !hasCT(c.pkt) {
			return no
		}
		v = c.pkt.CT.Mark
	}
	return triOf((v&m.Mask == m.Value) != m.Neg)
}
