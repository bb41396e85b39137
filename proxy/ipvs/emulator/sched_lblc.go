package emulator

import (
	"net/netip"
	"time"
)

// The lblc and lblcr cache parameters (ip_vs_lblc.c, ip_vs_lblcr.c).
const (
	lblcTabBits         = 10
	lblcTabSize         = 1 << lblcTabBits
	lblcMaxSize         = lblcTabSize * 16
	checkExpireInterval = 60 * time.Second
	entryTimeout        = 6 * time.Minute
	countForFullExpire  = 30
)

// lblcOverloaded is is_overloaded() of lblc/lblcr: the dest has more active connections
// than its weight and some dest of the service has fewer than half its weight.
func lblcOverloaded(d *dest, s *service) bool {
	if d.active > d.weight {
		for _, o := range s.dests {
			if o.active*2 < o.weight {
				return true
			}
		}
	}
	return false
}

// gcTable is the hash table and timer state shared by lblc and lblcr.
type gcTable[E any] struct {
	buckets [lblcTabSize][]*E // each bucket newest first (hlist_add_head)
	entries int
	rover   int
	counter int
	dead    bool
}

func lblcBucket(v6 bool, a netip.Addr) int { return int(hash32(foldFor(v6, a), lblcTabBits)) }

// ---- lblc ----

type lblcEntry struct {
	addr    netip.Addr
	dest    *dest
	lastuse time.Time
}

type lblcSched struct {
	tbl gcTable[lblcEntry]
}

func (l *lblcSched) init(m *Model, s *service) {
	l.tbl = gcTable[lblcEntry]{counter: 1}
	m.schedule(event{at: m.now.Add(checkExpireInterval), kind: evSchedTick, svc: s, gen: s.schedGen})
}

func (l *lblcSched) done(_ *Model, _ *service) {
	l.tbl.dead = true
	for i := range l.tbl.buckets {
		for _, e := range l.tbl.buckets[i] {
			e.dest.refs--
		}
		l.tbl.buckets[i] = nil
	}
	l.tbl.entries = 0
}

func (l *lblcSched) addDest(*Model, *service, *dest)      {}
func (l *lblcSched) delDest(*Model, *service, *dest, int) {}
func (l *lblcSched) updDest(*Model, *service, *dest)      {}

func (l *lblcSched) get(v6 bool, a netip.Addr) *lblcEntry {
	for _, e := range l.tbl.buckets[lblcBucket(v6, a)] {
		if e.addr == a {
			return e
		}
	}
	return nil
}

func (l *lblcSched) del(b int, e *lblcEntry) {
	bk := l.tbl.buckets[b]
	for i, x := range bk {
		if x == e {
			l.tbl.buckets[b] = append(bk[:i:i], bk[i+1:]...)
			break
		}
	}
	e.dest.refs--
}

func (l *lblcSched) schedule(m *Model, s *service, in *schedInput, dry bool) *dest {
	v6 := s.key.v6
	en := l.get(v6, in.daddr)
	if en != nil {
		if !dry {
			en.lastuse = m.now
		}
		d := en.dest
		if d.available && d.weight > 0 && !lblcOverloaded(d, s) {
			return d
		}
	}
	d := weightedLeast(s.dests, (*dest).overhead)
	if d == nil || dry || l.tbl.dead {
		return d
	}
	// ip_vs_lblc_new(): replace an entry pointing elsewhere, keep one already right.
	b := lblcBucket(v6, in.daddr)
	if en != nil {
		if en.dest == d {
			return d
		}
		// ip_vs_lblc_del() here does not decrement tbl->entries (only the GC paths
		// do), so every replacement leaves the counter one higher, as in the kernel.
		l.del(b, en)
	}
	d.refs++
	ne := &lblcEntry{addr: in.daddr, dest: d, lastuse: m.now}
	l.tbl.buckets[b] = append([]*lblcEntry{ne}, l.tbl.buckets[b]...)
	l.tbl.entries++
	return d
}

// tick is ip_vs_lblc_check_expire().
func (l *lblcSched) tick(m *Model, s *service) {
	defer m.schedule(event{at: m.now.Add(checkExpireInterval), kind: evSchedTick, svc: s, gen: s.schedGen})
	t := &l.tbl
	now := m.now
	if t.counter%countForFullExpire == 0 {
		j := t.rover
		for i := 0; i < lblcTabSize; i++ {
			j = (j + 1) & (lblcTabSize - 1)
			for _, e := range append([]*lblcEntry(nil), t.buckets[j]...) {
				if now.Before(e.lastuse.Add(m.sys.LBLCExpiration)) {
					continue
				}
				l.del(j, e)
				t.entries--
			}
		}
		t.rover = j
		t.counter = 1
		return
	}
	if t.entries <= lblcMaxSize {
		t.counter++
		return
	}
	goal := (t.entries - lblcMaxSize) * 4 / 3
	if goal > lblcMaxSize/2 {
		goal = lblcMaxSize / 2
	}
	j := t.rover
	for i := 0; i < lblcTabSize; i++ {
		j = (j + 1) & (lblcTabSize - 1)
		for _, e := range append([]*lblcEntry(nil), t.buckets[j]...) {
			if now.Before(e.lastuse.Add(entryTimeout)) {
				continue
			}
			l.del(j, e)
			t.entries--
			goal--
		}
		if goal <= 0 {
			break
		}
	}
	t.rover = j
}

// ---- lblcr ----

type lblcrEntry struct {
	addr    netip.Addr
	set     []*dest // ip_vs_dest_set: newest first (list_add_rcu)
	lastmod time.Time
	lastuse time.Time
}

type lblcrSched struct {
	tbl gcTable[lblcrEntry]
}

func (l *lblcrSched) init(m *Model, s *service) {
	l.tbl = gcTable[lblcrEntry]{counter: 1}
	m.schedule(event{at: m.now.Add(checkExpireInterval), kind: evSchedTick, svc: s, gen: s.schedGen})
}

func (l *lblcrSched) done(_ *Model, _ *service) {
	l.tbl.dead = true
	for i := range l.tbl.buckets {
		for _, e := range l.tbl.buckets[i] {
			for _, d := range e.set {
				d.refs--
			}
		}
		l.tbl.buckets[i] = nil
	}
	l.tbl.entries = 0
}

func (l *lblcrSched) addDest(*Model, *service, *dest)      {}
func (l *lblcrSched) delDest(*Model, *service, *dest, int) {}
func (l *lblcrSched) updDest(*Model, *service, *dest)      {}

func (l *lblcrSched) get(v6 bool, a netip.Addr) *lblcrEntry {
	for _, e := range l.tbl.buckets[lblcBucket(v6, a)] {
		if e.addr == a {
			return e
		}
	}
	return nil
}

func (l *lblcrSched) free(b int, e *lblcrEntry) {
	bk := l.tbl.buckets[b]
	for i, x := range bk {
		if x == e {
			l.tbl.buckets[b] = append(bk[:i:i], bk[i+1:]...)
			break
		}
	}
	for _, d := range e.set {
		d.refs--
	}
	e.set = nil
}

// setInsert is ip_vs_dest_set_insert(): new members go to the head.
func setInsert(m *Model, e *lblcrEntry, d *dest, check bool) {
	if check {
		for _, x := range e.set {
			if x == d {
				return
			}
		}
	}
	d.refs++
	e.set = append([]*dest{d}, e.set...)
	e.lastmod = m.now
}

// setMin is ip_vs_dest_set_min().
func setMin(set []*dest) *dest {
	var least *dest
	var loh int64
	k := 0
	for ; k < len(set); k++ {
		d := set[k]
		if d.overload {
			continue
		}
		if d.weight > 0 && d.available {
			least, loh = d, int64(int32(d.overhead()))
			break
		}
	}
	if least == nil {
		return nil
	}
	for _, d := range set[k+1:] {
		if d.overload {
			continue
		}
		doh := int64(int32(d.overhead()))
		if loh*int64(d.weight) > doh*int64(least.weight) && d.available {
			least, loh = d, doh
		}
	}
	return least
}

// setMax is ip_vs_dest_set_max().
func setMax(set []*dest) *dest {
	var most *dest
	var moh int64
	k := 0
	for ; k < len(set); k++ {
		if set[k].weight > 0 {
			most, moh = set[k], int64(int32(set[k].overhead()))
			break
		}
	}
	if most == nil {
		return nil
	}
	for _, d := range set[k+1:] {
		doh := int64(int32(d.overhead()))
		if moh*int64(d.weight) < doh*int64(most.weight) && d.weight > 0 {
			most, moh = d, doh
		}
	}
	return most
}

func (l *lblcrSched) schedule(m *Model, s *service, in *schedInput, dry bool) *dest {
	v6 := s.key.v6
	en := l.get(v6, in.daddr)
	if en != nil {
		if !dry {
			en.lastuse = m.now
		}
		d := setMin(en.set)
		if !dry && len(en.set) > 1 && m.now.After(en.lastmod.Add(m.sys.LBLCRExpiration)) {
			if mx := setMax(en.set); mx != nil {
				for i, x := range en.set {
					if x == mx {
						en.set = append(en.set[:i:i], en.set[i+1:]...)
						en.lastmod = m.now
						mx.refs--
						break
					}
				}
			}
		}
		if d != nil && !lblcOverloaded(d, s) {
			return d
		}
		d = weightedLeast(s.dests, (*dest).overhead)
		if d == nil || dry {
			return d
		}
		if !l.tbl.dead {
			setInsert(m, en, d, true)
		}
		return d
	}
	d := weightedLeast(s.dests, (*dest).overhead)
	if d == nil || dry || l.tbl.dead {
		return d
	}
	ne := &lblcrEntry{addr: in.daddr, lastuse: m.now}
	setInsert(m, ne, d, false)
	b := lblcBucket(v6, in.daddr)
	l.tbl.buckets[b] = append([]*lblcrEntry{ne}, l.tbl.buckets[b]...)
	l.tbl.entries++
	return d
}

// tick is ip_vs_lblcr_check_expire().
func (l *lblcrSched) tick(m *Model, s *service) {
	defer m.schedule(event{at: m.now.Add(checkExpireInterval), kind: evSchedTick, svc: s, gen: s.schedGen})
	t := &l.tbl
	now := m.now
	if t.counter%countForFullExpire == 0 {
		j := t.rover
		for i := 0; i < lblcTabSize; i++ {
			j = (j + 1) & (lblcTabSize - 1)
			for _, e := range append([]*lblcrEntry(nil), t.buckets[j]...) {
				if e.lastuse.Add(m.sys.LBLCRExpiration).After(now) {
					continue
				}
				l.free(j, e)
				t.entries--
			}
		}
		t.rover = j
		t.counter = 1
		return
	}
	if t.entries <= lblcMaxSize {
		t.counter++
		return
	}
	goal := (t.entries - lblcMaxSize) * 4 / 3
	if goal > lblcMaxSize/2 {
		goal = lblcMaxSize / 2
	}
	j := t.rover
	for i := 0; i < lblcTabSize; i++ {
		j = (j + 1) & (lblcTabSize - 1)
		for _, e := range append([]*lblcrEntry(nil), t.buckets[j]...) {
			if now.Before(e.lastuse.Add(entryTimeout)) {
				continue
			}
			l.free(j, e)
			t.entries--
			goal--
		}
		if goal <= 0 {
			break
		}
	}
	t.rover = j
}
