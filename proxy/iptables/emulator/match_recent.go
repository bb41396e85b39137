package emulator

import (
	"fmt"
	"net/netip"
	"strconv"
)

// The recent match module's options; the lists it keeps are in recent.go.

// Recent commands.
const (
	RecentSet    = "--set"
	RecentCheck  = "--rcheck"
	RecentUpdate = "--update"
	RecentRemove = "--remove"
)

// recentMaxHitcount is the largest --hitcount the kernel accepts (XT_RECENT_MAX_NSTAMPS
// less one: 65535 on current kernels, as a 6.18 kernel showed; 255 before the limit
// was raised).
const recentMaxHitcount = 65535

// RecentMatch is -m recent (xt_recent).
type RecentMatch struct {
	Command  string // RecentSet, RecentCheck, RecentUpdate or RecentRemove
	Neg      bool
	Seconds  uint32
	Reap     bool
	Hitcount uint32
	TTL      bool
	Name     string     // default "DEFAULT"
	Mask     netip.Addr // default all ones
	Dest     bool       // --rdest (default --rsource)
	nameSet  bool
}

// Module implements Match.
func (*RecentMatch) Module() string { return "recent" }

func (m *RecentMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	switch opt {
	case RecentSet, RecentCheck, RecentUpdate, RecentRemove:
		if m.Command != "" {
			return fmt.Errorf("recent takes only one of --set, --rcheck, --update, --remove")
		}
		m.Command, m.Neg = opt, neg
	case "--seconds", "--hitcount":
		n, err := parseUint32(args[0].val)
		if err != nil {
			return err
		}
		if opt == "--seconds" {
			m.Seconds = n
		} else {
			m.Hitcount = n
		}
	case "--reap":
		m.Reap = true
	case "--rttl":
		m.TTL = true
	case "--name":
		if args[0].val == "" || len(args[0].val) > 199 {
			return fmt.Errorf("recent: invalid --name %q", args[0].val)
		}
		m.Name, m.nameSet = args[0].val, true
	case "--rsource":
		m.Dest = false
	case "--rdest":
		m.Dest = true
	case "--mask":
		a, err := netip.ParseAddr(args[0].val)
		if err != nil || FamilyOf(a) != rc.family {
			return fmt.Errorf("invalid %s mask %q", rc.family, args[0].val)
		}
		m.Mask = a
	}
	return nil
}

func (m *RecentMatch) finish(rc *ruleCtx) error {
	if m.Command == "" {
		return fmt.Errorf("recent needs one of --set, --rcheck, --update, --remove")
	}
	if (m.Command == RecentSet || m.Command == RecentRemove) && (m.Seconds != 0 || m.Hitcount != 0 || m.Reap || m.TTL) {
		return fmt.Errorf("recent %s takes no --seconds, --hitcount, --reap or --rttl", m.Command)
	}
	if m.Reap && m.Seconds == 0 {
		return fmt.Errorf("recent --reap needs --seconds")
	}
	if m.Hitcount > recentMaxHitcount {
		return fmt.Errorf("recent --hitcount %d is above %d", m.Hitcount, recentMaxHitcount)
	}
	if !m.nameSet {
		m.Name = "DEFAULT"
	}
	if !m.Mask.IsValid() {
		m.Mask = fullMask(rc.family)
	}
	return nil
}

func (m *RecentMatch) appendArgs(b []byte) []byte {
	b = appendNeg(b, m.Neg)
	b = append(b, ' ')
	b = append(b, m.Command...)
	if m.Seconds != 0 {
		b = append(b, " --seconds "...)
		b = strconv.AppendUint(b, uint64(m.Seconds), 10)
	}
	if m.Reap {
		b = append(b, " --reap"...)
	}
	if m.Hitcount != 0 {
		b = append(b, " --hitcount "...)
		b = strconv.AppendUint(b, uint64(m.Hitcount), 10)
	}
	if m.TTL {
		b = append(b, " --rttl"...)
	}
	b = append(b, " --name "...)
	b = append(b, m.Name...)
	b = append(b, " --mask "...)
	b = m.Mask.AppendTo(b)
	if m.Dest {
		return append(b, " --rdest"...)
	}
	return append(b, " --rsource"...)
}

func (m *RecentMatch) eval(c *evalCtx) tri { return c.recent(m) }
