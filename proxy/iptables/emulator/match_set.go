package emulator

import (
	"fmt"
	"strconv"
	"strings"
)

// The set match module; the ipsets it tests are in ipset.go.

// SetMatch is -m set --match-set NAME DIRS. Dirs holds one entry per set dimension,
// true for dst and false for src. Packet/byte counter conditions are kept but not
// modelled (the rule is then undecidable).
type SetMatch struct {
	Name                string
	Dirs                []bool
	Neg                 bool
	ReturnNomatch       bool
	NoUpdateCounters    bool
	NoUpdateSubcounters bool
	Counters            []string // raw counter conditions: "--packets-gt 5", "! --bytes-eq 3"
}

// Module implements Match.
func (*SetMatch) Module() string { return "set" }

func (m *SetMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	switch opt {
	case "--match-set":
		m.Name, m.Neg = args[0].val, neg
		for _, d := range strings.Split(args[1].val, ",") {
			switch d {
			case "src":
				m.Dirs = append(m.Dirs, false)
			case "dst":
				m.Dirs = append(m.Dirs, true)
			default:
				return fmt.Errorf("bad set direction %q (want src or dst)", d)
			}
		}
		if len(m.Dirs) > 6 {
			return fmt.Errorf("too many set dimensions")
		}
	case "--return-nomatch":
		m.ReturnNomatch = true
	case "--update-counters":
		if !neg {
			return fmt.Errorf("--update-counters is only meaningful as ! --update-counters")
		}
		m.NoUpdateCounters = true
	case "--update-subcounters":
		if !neg {
			return fmt.Errorf("--update-subcounters is only meaningful as ! --update-subcounters")
		}
		m.NoUpdateSubcounters = true
	default:
		if _, err := strconv.ParseUint(args[0].val, 10, 64); err != nil {
			return fmt.Errorf("invalid number %q", args[0].val)
		}
		s := opt + " " + args[0].val
		if neg {
			s = "! " + s
		}
		m.Counters = append(m.Counters, s)
	}
	return nil
}

func (m *SetMatch) finish(*ruleCtx) error {
	if m.Name == "" {
		return fmt.Errorf("-m set needs --match-set")
	}
	return nil
}

func (m *SetMatch) appendArgs(b []byte) []byte {
	b = appendNeg(b, m.Neg)
	b = append(b, " --match-set "...)
	b = append(b, m.Name...)
	b = append(b, ' ')
	for i, d := range m.Dirs {
		if i > 0 {
			b = append(b, ',')
		}
		if d {
			b = append(b, "dst"...)
		} else {
			b = append(b, "src"...)
		}
	}
	if m.ReturnNomatch {
		b = append(b, " --return-nomatch"...)
	}
	if m.NoUpdateCounters {
		b = append(b, " ! --update-counters"...)
	}
	if m.NoUpdateSubcounters {
		b = append(b, " ! --update-subcounters"...)
	}
	for _, s := range m.Counters {
		b = append(b, ' ')
		b = append(b, s...)
	}
	return b
}

func (m *SetMatch) eval(c *evalCtx) tri {
	set := c.st.ipsets.Get(m.Name)
	if set == nil {
		return unknown
	}
	res := set.test(c.pkt, m.Dirs)
	if res == setNomatch {
		if m.ReturnNomatch {
			return triOf(!m.Neg)
		}
		res = setMiss
	}
	r := triOf((res == setHit) != m.Neg)
	if r == yes && len(m.Counters) > 0 {
		return unknown
	}
	return r
}
