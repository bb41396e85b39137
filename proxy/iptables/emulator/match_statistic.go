package emulator

import (
	"fmt"
	"math"
	"strconv"
)

// The statistic match module (random and nth modes).

// StatisticMatch is -m statistic. Random mode matches with probability
// Probability/2^31, the kernel's fixed-point value (iptables stores round(P·2^31)); nth
// mode matches every Every-th packet, starting with packet number Packet (0-based).
type StatisticMatch struct {
	Nth         bool
	Probability uint32 // random mode: P·2^31, rounded
	Every       uint32 // nth mode: N of --every N
	Packet      uint32 // nth mode: --packet
	Neg         bool
	modeSet     bool
}

// Module implements Match.
func (*StatisticMatch) Module() string { return "statistic" }

// Prob returns the random-mode probability as the kernel applies it.
func (m *StatisticMatch) Prob() float64 { return float64(m.Probability) / (1 << 31) }

func (m *StatisticMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	s := args[0].val
	switch opt {
	case "--mode":
		switch s {
		case "random":
		case "nth":
			m.Nth = true
		default:
			return fmt.Errorf("bad mode %q (want random or nth)", s)
		}
		m.modeSet = true
	case "--probability":
		p, err := parseProbability(s)
		if err != nil {
			return err
		}
		m.Probability = p
		m.Neg = m.Neg || neg
	case "--every":
		n, err := parseUint32(s)
		if err != nil || n == 0 {
			return fmt.Errorf("--every must be a positive number, not %q", s)
		}
		m.Every = n
		m.Neg = m.Neg || neg
	case "--packet":
		n, err := parseUint32(s)
		if err != nil {
			return err
		}
		m.Packet = n
	}
	return nil
}

func (m *StatisticMatch) finish(rc *ruleCtx) error {
	if !m.modeSet {
		return fmt.Errorf("statistic: no --mode given")
	}
	k := func(o string) bool { return rc.has(m, o) }
	if m.Nth {
		if k("--probability") {
			return fmt.Errorf("--probability can only be used in random mode")
		}
		if !k("--every") || !k("--packet") {
			return fmt.Errorf("statistic nth mode needs --every and --packet")
		}
		if m.Packet >= m.Every {
			return fmt.Errorf("--packet must be below --every")
		}
	} else {
		if k("--every") || k("--packet") {
			return fmt.Errorf("--every and --packet can only be used in nth mode")
		}
		if !k("--probability") {
			return fmt.Errorf("statistic random mode needs --probability")
		}
	}
	return nil
}

func (m *StatisticMatch) appendArgs(b []byte) []byte {
	if m.Nth {
		b = append(b, " --mode nth"...)
		b = appendNeg(b, m.Neg)
		b = append(b, " --every "...)
		b = strconv.AppendUint(b, uint64(m.Every), 10)
		b = append(b, " --packet "...)
		return strconv.AppendUint(b, uint64(m.Packet), 10)
	}
	b = append(b, " --mode random"...)
	b = appendNeg(b, m.Neg)
	b = append(b, " --probability "...)
	return strconv.AppendFloat(b, m.Prob(), 'f', 11, 64)
}

func (m *StatisticMatch) eval(c *evalCtx) tri {
	if m.Nth {
		return triOf(c.nth(m) != m.Neg)
	}
	return triOf(c.chance(m.Prob()) != m.Neg)
}

// parseProbability parses --probability P as iptables stores it: round(P·2^31), P
// between 0 and 1.
func parseProbability(s string) (uint32, error) {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || p < 0 || p > 1 || math.IsNaN(p) {
		return 0, fmt.Errorf("--probability must be between 0 and 1, not %q", s)
	}
	return uint32(math.Round(p * (1 << 31))), nil
}
