package emulator

import (
	"net/netip"
	"slices"
	"time"
)

// recentConf is what the kernel keeps per xt_recent list (struct recent_table) apart
// from its entries: the address mask, taken from the first rule that named the list
// (later rules' --mask is ignored), and nstamps_max_mask, the size of each entry's
// time-stamp ring less one.
type recentConf struct {
	mask      netip.Addr
	stampMask int
}

// nstampMask is recent_mt_check()'s nstamp_mask for a rule: from ip_pkt_list_tot if set
// and above the rule's --hitcount, else from the hitcount, else 32 stamps.
func nstampMask(pktTot int, hitcount uint32) int {
	pow2 := func(n int) int {
		p := 1
		for p < n {
			p <<= 1
		}
		return p
	}
	switch {
	case pktTot > 0 && int(hitcount) < pktTot:
		return pow2(pktTot) - 1
	case hitcount > 0:
		return pow2(int(hitcount)) - 1
	}
	return 32 - 1
}

// recentConfig returns the list configuration after checking rule m: a list that
// exists (in next, built in rule order, or else in the current state) keeps its mask
// and grows its stamp ring if m needs more.
func (st *state) recentConfig(next map[string]recentConf, m *RecentMatch) recentConf {
	want := nstampMask(st.recentPktTot, m.Hitcount)
	cf, ok := next[m.Name]
	if !ok {
		cf, ok = st.recentConf[m.Name]
	}
	if !ok {
		return recentConf{mask: m.Mask, stampMask: want}
	}
	cf.stampMask = max(cf.stampMask, want)
	return cf
}

// recentTable is one xt_recent list: at most listTot addresses, each with up to pktTot
// time stamps, kept in least-recently-updated order (the kernel evicts the head of
// this order when the list is full, and --reap looks only at the head).
type recentTable struct {
	name    string
	entries map[netip.Addr]*recentEntry
	lru     []*recentEntry // oldest first
}

type recentEntry struct {
	addr    netip.Addr
	ttl     uint8
	stamps  []time.Time // ring of pktTot slots
	index   int         // slot after the newest stamp (1-based like the kernel's)
	nstamps int
}

func newRecentTable(name string) *recentTable {
	return &recentTable{name: name, entries: make(map[netip.Addr]*recentEntry)}
}

func (t *recentTable) clone() *recentTable {
	nt := &recentTable{name: t.name, entries: make(map[netip.Addr]*recentEntry, len(t.entries)), lru: make([]*recentEntry, len(t.lru))}
	for i, e := range t.lru {
		ne := *e
		ne.stamps = slices.Clone(e.stamps)
		nt.lru[i] = &ne
		nt.entries[ne.addr] = &ne
	}
	return nt
}

func (t *recentTable) remove(e *recentEntry) {
	delete(t.entries, e.addr)
	if i := slices.Index(t.lru, e); i >= 0 {
		t.lru = slices.Delete(t.lru, i, i+1)
	}
}

func (t *recentTable) touch(e *recentEntry) {
	if i := slices.Index(t.lru, e); i >= 0 && i != len(t.lru)-1 {
		t.lru = append(slices.Delete(t.lru, i, i+1), e)
	}
}

func (t *recentTable) init(addr netip.Addr, ttl uint8, now time.Time, listTot, pktTot int) *recentEntry {
	if len(t.entries) >= listTot && len(t.lru) > 0 {
		t.remove(t.lru[0])
	}
	e := &recentEntry{addr: addr, ttl: ttl, stamps: make([]time.Time, pktTot), index: 1, nstamps: 1}
	e.stamps[0] = now
	t.entries[addr] = e
	t.lru = append(t.lru, e)
	return e
}

func (t *recentTable) update(e *recentEntry, now time.Time) {
	pktTot := len(e.stamps)
	e.index %= pktTot
	e.stamps[e.index] = now
	e.index++
	if e.index > e.nstamps {
		e.nstamps = e.index
	}
	t.touch(e)
}

// reap drops the oldest entry when its newest stamp is older than cutoff, unless it is
// the entry about to be updated.
func (t *recentTable) reap(cutoff time.Time, working *recentEntry, updating bool) {
	if len(t.lru) == 0 {
		return
	}
	e := t.lru[0]
	if e == working && updating {
		return
	}
	if e.stamps[e.index-1].Before(cutoff) {
		t.remove(e)
	}
}

// RecentEntry is one address of an xt_recent list, as /proc/net/xt_recent shows it.
type RecentEntry struct {
	Addr     netip.Addr
	TTL      uint8
	LastSeen time.Time
	Stamps   []time.Time // oldest first
}

func (e *recentEntry) export() RecentEntry {
	out := RecentEntry{Addr: e.addr, TTL: e.ttl}
	n := len(e.stamps)
	for i := 0; i < e.nstamps; i++ {
		// The ring's oldest stamp is at index when it is full.
		j := i
		if e.nstamps == n {
			j = (e.index + i) % n
		}
		out.Stamps = append(out.Stamps, e.stamps[j])
	}
	out.LastSeen = e.stamps[(e.index-1+n)%n]
	return out
}

// recent evaluates an xt_recent match as the kernel does.
func (c *evalCtx) recent(m *RecentMatch) tri {
	addr := c.pkt.Src
	if m.Dest {
		addr = c.pkt.Dst
	}
	cf, ok := c.st.recentConf[m.Name]
	if !ok {
		// A rule evaluated without having been loaded through a restore.
		cf = recentConf{mask: m.Mask, stampMask: nstampMask(c.st.recentPktTot, m.Hitcount)}
	}
	addr = maskAddr(addr, cf.mask)
	ttl := c.pkt.TTL
	ret := m.Neg
	now := c.env.Now()
	t := c.recentTable(m.Name, false)
	var e *recentEntry
	if t != nil {
		e = t.entries[addr]
		if e != nil && m.TTL && e.ttl != 0 && ttl != 0 && e.ttl != ttl {
			e = nil
		}
	}
	if e == nil {
		if m.Command != RecentSet {
			return triOf(ret)
		}
		t = c.recentTable(m.Name, true)
		t.init(addr, ttl, now, c.st.recentListTot, cf.stampMask+1)
		return triOf(!ret)
	}
	if m.Command != RecentCheck || m.Reap {
		// This evaluation changes the list: work on the writable copy.
		t = c.recentTable(m.Name, true)
		e = t.entries[addr]
	}
	switch m.Command {
	case RecentSet:
		ret = !ret
	case RecentRemove:
		t.remove(e)
		return triOf(!ret)
	default:
		cutoff := now.Add(-time.Duration(m.Seconds) * time.Second)
		hits := uint32(0)
		for i := 0; i < e.nstamps; i++ {
			if m.Seconds != 0 && e.stamps[i].Before(cutoff) {
				continue
			}
			hits++
			if m.Hitcount == 0 || hits >= m.Hitcount {
				ret = !ret
				break
			}
		}
		if m.Reap {
			t.reap(cutoff, e, m.Command == RecentUpdate && ret)
		}
	}
	if m.Command == RecentSet || (m.Command == RecentUpdate && ret) {
		if _, still := t.entries[addr]; still {
			t.update(e, now)
			e.ttl = ttl
		}
	}
	return triOf(ret)
}

// recentTable returns the named list, for writing (a private copy in a dry run) or
// for reading (nil when it does not exist).
func (c *evalCtx) recentTable(name string, write bool) *recentTable {
	if c.dry {
		if t, ok := c.ov.recent[name]; ok {
			return t
		}
	}
	t := c.st.recent[name]
	if !write {
		return t
	}
	if c.dry {
		if c.ov.recent == nil {
			c.ov.recent = make(map[string]*recentTable)
		}
		if t == nil {
			t = newRecentTable(name)
		} else {
			t = t.clone()
		}
		c.ov.recent[name] = t
		return t
	}
	if t == nil {
		t = newRecentTable(name)
		c.st.recent[name] = t
	}
	return t
}
