package netsim

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// tupleOf returns the packet's tuple.
func tupleOf(p *Packet) netfilter.Tuple {
	return netfilter.Tuple{Proto: p.Proto, Src: p.Src, Dst: p.Dst, SrcPort: p.SrcPort, DstPort: p.DstPort}
}

// TCPState is conntrack's view of a TCP connection (TCP_CONNTRACK_*).
type TCPState uint8

// TCP conntrack states, in the kernel's order.
const (
	TCPNone TCPState = iota
	TCPSynSent
	TCPSynRecv
	TCPEstablished
	TCPFinWait
	TCPCloseWait
	TCPLastAck
	TCPTimeWait
	TCPClose
	TCPSynSent2
	tcpMax    // sIV: invalid transition
	tcpIgnore // sIG: ignore
)

var tcpStateNames = [...]string{"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT", "CLOSE_WAIT", "LAST_ACK", "TIME_WAIT", "CLOSE", "SYN_SENT2"}

func (s TCPState) String() string {
	if int(s) < len(tcpStateNames) {
		return tcpStateNames[s]
	}
	return "INVALID"
}

// Conn is a conntrack entry.
type Conn struct {
	ID    uint64
	Orig  netfilter.Tuple // the tuple of the first packet, as it arrived
	Reply netfilter.Tuple // the tuple replies are expected with (NAT changes it)

	// What every packet of the connection writes, from Status to tcp, is 128 bytes. An
	// entry is 320 bytes, a size the allocator places at multiples of 64, so these
	// fields start 192 bytes in and fill two cache lines of their own. (Packets of the
	// two directions pass a node on different goroutines, often on different cores:
	// each line they write moves between the cores' caches.) Fields before them are
	// written rarely.
	queued bool // in the expiry queue and not removed (a removed entry's item is skipped there)
	_      [55]byte

	Status   netfilter.CtStatus
	TCPState TCPState
	Mark     uint32 // connmark
	Created  time.Time
	Expires  time.Time
	// Packets and bytes seen in the original and reply directions.
	Packets [2]uint64
	Bytes   [2]uint64

	tcp [2]tcpSide
}

type tcpSide struct {
	end, maxend, maxwin uint32
	maxack              uint32
	scale               uint8
	flags               uint8
}

const (
	tcpFlagWindowScale = 1 << iota
	tcpFlagSACKPerm
	tcpFlagCloseInit
	tcpFlagMaxAckSet
	tcpFlagDataUnacked
	// tcpFlagBeLiberal: a connection picked up mid-stream, whose window scaling is not
	// known, is not held to its windows (IP_CT_TCP_FLAG_BE_LIBERAL, set by tcp_new).
	tcpFlagBeLiberal
)

// Has reports whether all bits of s are set.
func (c *Conn) Has(s netfilter.CtStatus) bool { return c.Status&s == s }

// String renders the entry like `conntrack -L`.
func (c *Conn) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-4s %d ", ProtoName(c.Orig.Proto), c.Orig.Proto)
	if c.Orig.Proto == netfilter.ProtoTCP {
		fmt.Fprintf(&b, "%s ", c.TCPState)
	}
	fmt.Fprintf(&b, "%s ", c.Orig)
	if !c.Has(netfilter.StatusSeenReply) {
		b.WriteString("[UNREPLIED] ")
	}
	fmt.Fprintf(&b, "%s ", c.Reply)
	if c.Has(netfilter.StatusAssured) {
		b.WriteString("[ASSURED] ")
	}
	fmt.Fprintf(&b, "mark=%d", c.Mark)
	return b.String()
}

// ConntrackSettings are the nf_conntrack sysctls that change outcomes.
type ConntrackSettings struct {
	TCPBeLiberal bool // nf_conntrack_tcp_be_liberal: out-of-window segments are not INVALID
	TCPLoose     bool // nf_conntrack_tcp_loose: pick up established connections mid-stream

	TCPTimeouts  [10]time.Duration // indexed by TCPState; zero entries take the kernel default
	UDPTimeout   time.Duration     // nf_conntrack_udp_timeout (unreplied), default 30s
	UDPStream    time.Duration     // nf_conntrack_udp_timeout_stream, default 120s
	ICMPTimeout  time.Duration     // nf_conntrack_icmp_timeout, default 30s
	OtherTimeout time.Duration     // nf_conntrack_generic_timeout, default 600s
	TCPUnack     time.Duration     // nf_conntrack_tcp_timeout_unacknowledged, default 300s
}

// DefaultTCPTimeouts are the kernel's defaults per TCP conntrack state, with the values
// kube-proxy sets (established 24h, close_wait 1h).
var DefaultTCPTimeouts = [10]time.Duration{
	TCPSynSent:     2 * time.Minute,
	TCPSynRecv:     60 * time.Second,
	TCPEstablished: 24 * time.Hour,
	TCPFinWait:     2 * time.Minute,
	TCPCloseWait:   time.Hour,
	TCPLastAck:     30 * time.Second,
	TCPTimeWait:    2 * time.Minute,
	TCPClose:       10 * time.Second,
	TCPSynSent2:    2 * time.Minute,
}

func (s *ConntrackSettings) tcpTimeout(st TCPState) time.Duration {
	if int(st) < len(s.TCPTimeouts) && s.TCPTimeouts[st] != 0 {
		return s.TCPTimeouts[st]
	}
	return DefaultTCPTimeouts[st]
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Conntrack is a node's connection-tracking table.
//
// A node's table shares the node's datapath lock: a packet's way through the node takes
// one lock, not one for the node and another for each conntrack step. So its methods must
// not be called from a handler (handlers run under that lock).
//
// As in the kernel, an entry is created for the first packet of every flow (NATed or
// not) and inserted into the table ("confirmed") only when that packet leaves the node
// or is delivered locally; a packet dropped before that leaves no entry. NAT decisions
// change the entry's reply tuple before confirmation. Entries expire on the virtual clock.
type Conntrack struct {
	mu       *sync.Mutex // &own, or the node's datapath lock
	own      sync.Mutex
	table    ctTable
	settings ConntrackSettings
	now      func() time.Time
	nextID   uint64
	expq     expiryQueue // confirmed entries by (possibly stale) expiry
	expDead  int         // items of expq whose entry was removed (skipped when they come up)
	gcAt     int64       // expq[0].at when expq is not empty (every packet checks it)
	expMax   int64       // no item of expq is queued later than this (an upper bound)
	// Collections that swept the whole queue at once (sweepLocked), removing few
	// entries one by one or rebuilding the table without many (tests read them).
	sweepFew, sweepRebuilt int
	sweepMin               int // tests: ctSweepMin's value for this table (0: ctSweepMin)
	// oneProbeOff (tests) confirms every entry by separate lookups and puts, as
	// before ctTable.putNew4.
	oneProbeOff bool
	stats       CtStats
}

// CtStats are the counters of conntrack -S the simulation keeps: tuples NAT found taken
// while choosing a binding (found, as nf_conntrack_tuple_taken counts it), packets
// conntrack classified INVALID, entries inserted (confirmed),
// inserts that failed because another entry held a tuple (the packet is dropped, so Drop
// counts them too), and insert races resolved without a drop (ClashResolve: the later
// packet merged into the entry already inserted or, from Linux 5.6, its entry inserted
// by its reply tuple only; see confirmKernelLocked). EarlyDrop stays 0: the table has no
// size limit (nf_conntrack_max), so nothing is evicted to make room.
type CtStats struct {
	Found        uint64 `json:"found"`
	Invalid      uint64 `json:"invalid"`
	Insert       uint64 `json:"insert"`
	InsertFailed uint64 `json:"insert_failed"`
	Drop         uint64 `json:"drop"`
	EarlyDrop    uint64 `json:"early_drop"`
	ClashResolve uint64 `json:"clash_resolve"`
}

// String renders the counters like a line of conntrack -S.
func (s CtStats) String() string {
	return fmt.Sprintf("found=%d invalid=%d insert=%d insert_failed=%d drop=%d early_drop=%d clash_resolve=%d",
		s.Found, s.Invalid, s.Insert, s.InsertFailed, s.Drop, s.EarlyDrop, s.ClashResolve)
}

// Stats returns the table's counters.
func (t *Conntrack) Stats() CtStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

type ctRef struct {
	c     *Conn
	reply bool
}

// NewConntrack returns an empty table on the given clock.
func NewConntrack(now func() time.Time, s ConntrackSettings) *Conntrack {
	t := &Conntrack{table: newCtTable(), settings: s, now: now}
	t.mu = &t.own
	return t
}

// Settings returns the table's sysctls.
func (t *Conntrack) Settings() ConntrackSettings {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.settings
}

// SetSettings changes the table's sysctls; existing entries keep their deadlines.
func (t *Conntrack) SetSettings(s ConntrackSettings) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.settings = s
}

// lookup finds the entry for a tuple, dropping it if it has expired.
func (t *Conntrack) lookupLocked(tu netfilter.Tuple, now time.Time) (ctRef, bool) {
	r, ok := t.table.get(tu)
	if !ok {
		return ctRef{}, false
	}
	if !now.Before(r.c.Expires) {
		t.removeLocked(r.c)
		return ctRef{}, false
	}
	return r, true
}

// lookupPacketLocked is lookupLocked for the tuple of a packet with ports: an IPv4 packet's
// key is made from its addresses and ports at once.
func (t *Conntrack) lookupPacketLocked(p *Packet, now time.Time) (ctRef, bool) {
	if p.IPv6 || !p.Src.Is4() || !p.Dst.Is4() {
		return t.lookupLocked(tupleOf(p), now)
	}
	s, d := p.Src.As4(), p.Dst.As4()
	i := t.table.find(ctKey4{
		addrs: uint64(binary.BigEndian.Uint32(s[:]))<<32 | uint64(binary.BigEndian.Uint32(d[:])),
		rest:  uint64(p.SrcPort)<<32 | uint64(p.DstPort)<<16 | uint64(p.Proto),
	})
	if i < 0 {
		return ctRef{}, false
	}
	sl := &t.table.slots[i]
	if !now.Before(sl.c.Expires) {
		t.removeLocked(sl.c)
		return ctRef{}, false
	}
	return ctRef{c: sl.c, reply: sl.reply}, true
}

func (t *Conntrack) removeLocked(c *Conn) {
	if c.queued {
		// Its queue item stays, skipped when it comes up; when such items outnumber
		// the live ones the queue is rebuilt without them.
		c.queued = false
		if t.expDead++; t.expDead > 64 && 2*t.expDead > len(t.expq) {
			t.compactQueueLocked()
		}
	}
	t.table.delIf(c.Orig, c)
	t.table.delIf(c.Reply, c)
}

// compactQueueLocked drops the items of removed entries from the expiry queue.
func (t *Conntrack) compactQueueLocked() {
	if t.expDead == 0 {
		return
	}
	live := t.expq[:0]
	for _, it := range t.expq {
		if it.c.queued {
			live = append(live, it)
		}
	}
	clear(t.expq[len(live):])
	t.expq = live
	t.expDead = 0
	t.expq.init()
	t.queuedLocked()
}

// gcLocked drops expired entries. Entries sit in a queue keyed by the expiry they had
// when queued; one found due whose expiry moved on is queued again, so a packet's refresh
// costs nothing and collection is O(log n) per entry.
func (t *Conntrack) gcLocked(now time.Time) {
	if len(t.expq) == 0 {
		return
	}
	ns := now.UnixNano()
	if t.gcAt > ns {
		return
	}
	if len(t.expq) >= cmp.Or(t.sweepMin, ctSweepMin) && t.expMax <= ns {
		t.sweepLocked(now)
		return
	}
	for len(t.expq) > 0 && t.gcAt <= ns {
		c := t.expq.pop()
		switch {
		case !c.queued: // removed already
			t.expDead--
		case now.Before(c.Expires):
			at := c.Expires.UnixNano()
			t.expq.push(expItem{at: at, c: c})
			t.expMax = max(t.expMax, at)
		default:
			c.queued = false // its item is gone
			t.removeLocked(c)
		}
		t.queuedLocked()
	}
}

// ctSweepMin is the queue length from which a collection that finds every item due
// sweeps the queue and the table at once (sweepLocked) instead of popping the items one
// by one (a table's sweepMin, when set, overrides it: tests run with and without sweeps).
const ctSweepMin = 256

// sweepLocked is gcLocked when every item of the queue is due (now is at or past
// expMax), as after a step of the virtual clock past every timeout: it examines every
// item, as popping them all would, and ends in the same state (the same entries removed,
// one item per survivor queued at its entry's expiry), but in sequential passes over the
// queue and the table instead of a heap pop and two random table deletions per entry.
// With tens of thousands of entries those deletions miss the CPU's caches and TLB on
// every slot they touch (the table of 50,000 entries is 8 MiB); the sweep reads the
// table once in order and, when most entries go, clears it in place (it keeps its
// slots, as deletions do).
func (t *Conntrack) sweepLocked(now time.Time) {
	// Count first (one queue item per entry: the expired are those that go), so that
	// the pass below removes the few that go as it meets them, or leaves the table to
	// be rebuilt, without a list of them (a sweep of 50,000 entries built one of 400 KB).
	nGone, nLive := 0, 0
	for _, it := range t.expq {
		switch c := it.c; {
		case !c.queued: // removed already
		case now.Before(c.Expires):
			nLive++
		default:
			nGone++
		}
	}
	few := nGone <= nLive
	live := t.expq[:0]
	var maxAt int64
	for _, it := range t.expq {
		c := it.c
		switch {
		case !c.queued: // removed already
		case now.Before(c.Expires):
			at := c.Expires.UnixNano()
			live = append(live, expItem{at: at, c: c})
			maxAt = max(maxAt, at)
		default:
			c.queued = false
			if few {
				// Few go: remove them one by one, as collection would.
				t.table.delIf(c.Orig, c)
				t.table.delIf(c.Reply, c)
			}
		}
	}
	clear(t.expq[len(live):])
	t.expq = live
	t.expDead = 0
	t.expMax = maxAt
	t.expq.init()
	t.queuedLocked()
	if nGone == 0 {
		return
	}
	if few {
		t.sweepFew++
		return
	}
	// Most go: set the survivors' mappings aside, empty the table in place (no entry
	// read) and put them back.
	t.sweepRebuilt++
	type mapping struct {
		tu netfilter.Tuple
		r  ctRef
	}
	var keep []mapping
	for _, it := range live {
		for _, tu := range [2]netfilter.Tuple{it.c.Orig, it.c.Reply} {
			if r, ok := t.table.get(tu); ok && r.c == it.c {
				keep = append(keep, mapping{tu, r})
			}
		}
	}
	t.table.clear()
	for _, m := range keep {
		t.table.put(m.tu, m.r)
	}
}

// queuedLocked notes the earliest expiry queued after the queue changed.
func (t *Conntrack) queuedLocked() {
	if len(t.expq) > 0 {
		t.gcAt = t.expq[0].at
	} else {
		t.expMax = 0
	}
}

// expiryQueue is a min-heap of entries by the expiry they were queued with (Unix
// nanoseconds, held in the item: ordering the heap reads no entry). The sift-up and
// sift-down are container/heap's.
type expiryQueue []expItem

type expItem struct {
	at int64
	c  *Conn
}

func (q expiryQueue) init() {
	n := len(q)
	for i := n/2 - 1; i >= 0; i-- {
		q.down(i, n)
	}
}

func (q *expiryQueue) push(it expItem) {
	*q = append(*q, it)
	q.up(len(*q) - 1)
}

// pop removes and returns the entry with the earliest key.
func (q *expiryQueue) pop() *Conn {
	old := *q
	n := len(old) - 1
	old[0], old[n] = old[n], old[0]
	old.down(0, n)
	c := old[n].c
	old[n] = expItem{}
	*q = old[:n]
	return c
}

func (q expiryQueue) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || q[j].at >= q[i].at {
			break
		}
		q[i], q[j] = q[j], q[i]
		j = i
	}
}

func (q expiryQueue) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && q[j2].at < q[j1].at {
			j = j2 // = 2*i + 2  // right child
		}
		if q[j].at >= q[i].at {
			break
		}
		q[i], q[j] = q[j], q[i]
		i = j
	}
	return i > i0
}

// ctResult is what the conntrack hook tells the datapath about a packet.
type ctResult struct {
	conn    *Conn
	reply   bool
	state   netfilter.CtState
	isNew   bool // conn was created for this packet and is not yet confirmed
	related bool
}

// in runs conntrack for a packet at PREROUTING or OUTPUT at virtual time now (the
// packet's, read once for its whole way through the node): finds or creates its entry,
// runs the protocol state machine, and classifies the packet.
func (t *Conntrack) in(p *Packet, now time.Time) ctResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.inLocked(p, now)
	if r.state == netfilter.CtInvalid {
		t.stats.Invalid++
	}
	return r
}

// inLocked is in for a caller that holds the table's lock (a node's datapath: the node
// lock is its table's lock).
func (t *Conntrack) inLocked(p *Packet, now time.Time) ctResult {
	t.gcLocked(now)
	if p.l4off == 0 && p.Proto != netfilter.ProtoICMP {
		return ctResult{state: netfilter.CtInvalid}
	}
	if p.IsICMPError() {
		if p.Inner == nil || !p.Inner.hasPorts() && !p.Inner.IsICMPError() {
			return ctResult{state: netfilter.CtInvalid}
		}
		// The quoted packet went the other way, and as it left this node: NATed already.
		// Its tuple inverted is what a packet of the error's own direction would carry
		// (the kernel's nf_ct_invert_tuple on the inner tuple): look that up, so that an
		// error about a DNATed or SNATed packet finds the entry by its reply tuple.
		in := tupleOf(p.Inner)
		r, ok := t.lookupLocked(netfilter.Tuple{Proto: in.Proto, Src: in.Dst, Dst: in.Src, SrcPort: in.DstPort, DstPort: in.SrcPort}, now)
		if !ok {
			return ctResult{state: netfilter.CtInvalid}
		}
		return ctResult{conn: r.c, reply: r.reply, state: netfilter.CtRelated, related: true}
	}
	if !p.hasPorts() {
		// Other protocols (and ICMP types without ids) are tracked by addresses only.
		tu := netfilter.Tuple{Proto: p.Proto, Src: p.Src, Dst: p.Dst}
		return t.trackGenericLocked(p, tu, now)
	}
	r, ok := t.lookupPacketLocked(p, now)
	if !ok {
		return t.newLocked(p, tupleOf(p), now)
	}
	c := r.c
	dir := 0
	if r.reply {
		dir = 1
	}
	switch p.Proto {
	case netfilter.ProtoTCP:
		st, valid, reopen := t.tcpPacketLocked(c, dir, p, now)
		if reopen {
			t.removeLocked(c)
			return t.newLocked(p, tupleOf(p), now)
		}
		if !valid {
			return ctResult{state: netfilter.CtInvalid}
		}
		_ = st
	case netfilter.ProtoUDP, netfilter.ProtoSCTP:
		if r.reply {
			c.Status |= netfilter.StatusSeenReply
		}
		switch {
		case c.Status&statusNATClash != 0:
			// A clash entry keeps its 1 s timeout and never becomes ASSURED.
		case c.Has(netfilter.StatusSeenReply):
			c.Status |= netfilter.StatusAssured
			t.setTimeout(c, now, orDefault(t.settings.UDPStream, 120*time.Second))
		default:
			t.setTimeout(c, now, orDefault(t.settings.UDPTimeout, 30*time.Second))
		}
	default: // ICMP echo
		if r.reply {
			c.Status |= netfilter.StatusSeenReply
		}
		t.setTimeout(c, now, orDefault(t.settings.ICMPTimeout, 30*time.Second))
	}
	c.Packets[dir]++
	c.Bytes[dir] += uint64(len(p.Data))
	state := netfilter.CtEstablished
	if !r.reply && !c.Has(netfilter.StatusSeenReply) {
		state = netfilter.CtNew
	}
	return ctResult{conn: c, reply: r.reply, state: state}
}

func (t *Conntrack) trackGenericLocked(p *Packet, tu netfilter.Tuple, now time.Time) ctResult {
	r, ok := t.lookupLocked(tu, now)
	if !ok {
		return t.newLocked(p, tu, now)
	}
	if r.reply {
		r.c.Status |= netfilter.StatusSeenReply
	}
	t.setTimeout(r.c, now, orDefault(t.settings.OtherTimeout, 600*time.Second))
	state := netfilter.CtEstablished
	if !r.reply && !r.c.Has(netfilter.StatusSeenReply) {
		state = netfilter.CtNew
	}
	return ctResult{conn: r.c, reply: r.reply, state: state}
}

func (t *Conntrack) newLocked(p *Packet, tu netfilter.Tuple, now time.Time) ctResult {
	if p.Proto == netfilter.ProtoICMP && p.ICMPType != 8 || p.Proto == netfilter.ProtoICMPv6 && p.ICMPType != 128 {
		if p.isICMPEcho() { // an echo reply without a request
			return ctResult{state: netfilter.CtInvalid}
		}
	}
	t.nextID++
	c := &Conn{ID: t.nextID, Orig: tu, Reply: tu.Invert(), Created: now}
	c.Packets[0] = 1
	c.Bytes[0] = uint64(len(p.Data))
	switch p.Proto {
	case netfilter.ProtoTCP:
		idx := tcpIndex(p.TCPFlags)
		st := tcpTransitions[0][idx][TCPNone]
		if st == TCPEstablished && !t.settings.TCPLoose {
			return ctResult{state: netfilter.CtInvalid}
		}
		if st >= tcpMax {
			return ctResult{state: netfilter.CtInvalid}
		}
		c.TCPState = TCPNone
		if _, valid, _ := t.tcpPacketLocked(c, 0, p, now); !valid {
			return ctResult{state: netfilter.CtInvalid}
		}
		c.Packets[0], c.Bytes[0] = 1, uint64(len(p.Data))
	case netfilter.ProtoUDP, netfilter.ProtoSCTP:
		t.setTimeout(c, now, orDefault(t.settings.UDPTimeout, 30*time.Second))
	case netfilter.ProtoICMP, netfilter.ProtoICMPv6:
		t.setTimeout(c, now, orDefault(t.settings.ICMPTimeout, 30*time.Second))
	default:
		t.setTimeout(c, now, orDefault(t.settings.OtherTimeout, 600*time.Second))
	}
	return ctResult{conn: c, state: netfilter.CtNew, isNew: true}
}

func (t *Conntrack) setTimeout(c *Conn, now time.Time, d time.Duration) {
	c.Expires = now.Add(d)
}

// confirm inserts a new entry into the table when its first packet leaves the node or is
// delivered locally. It reports false when another entry already owns one of its tuples
// and the clash cannot be resolved (the kernel drops the packet then: the insert race
// behind the SNAT/DNAT clash bugs). It resolves clashes as a current kernel does.
func (t *Conntrack) confirm(c *Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmLocked(c, t.now())
}

// confirmLocked is confirm at virtual time now for a caller that holds the table's lock.
func (t *Conntrack) confirmLocked(c *Conn, now time.Time) bool {
	r, _ := t.confirmKernelLocked(c, now, netfilter.KernelVersion{})
	return r != ctInsertFailed
}

// ctInsert is what confirmation did with a new entry.
type ctInsert uint8

const (
	ctInserted      ctInsert = iota // the entry is in the table
	ctMerged                        // the entry clashed with an identical one: the packet now belongs to that one
	ctClashInserted                 // the entry clashed; inserted by its reply tuple only, for 1 s (Linux 5.6+)
	ctInsertFailed                  // the entry clashed: the packet is dropped
)

// statusNATClash is the kernel's IPS_NAT_CLASH: an entry confirmed by clash resolution,
// found only by its reply tuple, that never becomes ASSURED and expires after 1 s.
// (CtStatus.String does not name it; conntrack -L does not list such entries.)
const statusNATClash netfilter.CtStatus = 1 << 15

// clashKernel is the release from which nf_ct_resolve_clash inserts a clashing UDP entry
// whose NAT result differs (the patch "netfilter: conntrack: allow insertion of clashing
// entries", proxy's conntrack-udp-clash-insert change, row 42).
var clashKernel = netfilter.KernelVersion{Major: 5, Minor: 6}

// confirmKernelLocked inserts a new entry as the __nf_conntrack_confirm of Linux k does
// (net/netfilter/nf_conntrack_core.c). Two packets of one new flow that were both
// between their conntrack and confirmation hooks at once each carry an unconfirmed entry
// of their own, with their own NAT decision; the second to confirm finds the first's
// tuple in the table and the kernel's nf_ct_resolve_clash decides:
//
//   - an entry of a protocol without allow_clash (TCP, SCTP, ...) is dropped:
//     insert_failed and drop count it;
//   - a UDP entry identical to the one in the table in both directions (the
//     same NAT result, nf_ct_match) is merged: the packet goes on as a packet of that
//     entry (__nf_ct_resolve_clash) and clash_resolve counts it;
//   - a UDP entry with another NAT result is dropped before Linux 5.6; from 5.6
//     (nf_ct_resolve_clash_harder) it is inserted by its reply tuple only, marked
//     IPS_NAT_CLASH with a fixed 1 s timeout, so that the packet leaves with its own
//     NAT result and its reply finds its way back, unless its reply tuple is taken too,
//     which drops it;
//
// The modelled kernel behaviour is that of nf_conntrack_core.c read for this (the patch
// "netfilter: conntrack: allow insertion of clashing entries" and later changes to
// nf_ct_resolve_clash_harder): the merge of identical entries predates 5.6 (the patch
// says so), the insertion of a clashing entry comes with it. Not modelled: the harder
// path's hash-chain-length limit, the entry's removal on its first reply, and when the
// kernel gained the clash_resolve counter (the model counts it on every release).
func (t *Conntrack) confirmKernelLocked(c *Conn, now time.Time, k netfilter.KernelVersion) (ctInsert, *Conn) {
	if c.Has(netfilter.StatusConfirmed) {
		return ctInserted, c
	}
	// The common case, an IPv4 entry whose tuples no entry holds: both looked up and
	// put with one probe each (ctTable.putNew4). Otherwise, or with oneProbeOff, each
	// tuple is looked up (expired holders removed) and then put on its own.
	if !t.oneProbeOff && t.table.putNew4(c.Orig, c.Reply, c) {
		t.queueNewLocked(c)
		return ctInserted, c
	}
	ro, okO := t.lookupLocked(c.Orig, now)
	okO = okO && ro.c != c
	rr, okR := t.lookupLocked(c.Reply, now)
	okR = okR && rr.c != c
	if !okO && !okR {
		t.insertLocked(c, true)
		return ctInserted, c
	}
	winner := ro.c
	if !okO {
		winner = rr.c
	}
	if allowClash(c.Orig.Proto) {
		if winner.Orig == c.Orig && winner.Reply == c.Reply {
			winner.Packets[0] += c.Packets[0]
			winner.Bytes[0] += c.Bytes[0]
			t.stats.ClashResolve++
			return ctMerged, winner
		}
		if k.AtLeast(clashKernel) && !okR {
			c.Expires = now.Add(time.Second)
			c.Status |= statusNATClash
			t.insertLocked(c, false)
			t.stats.ClashResolve++
			return ctClashInserted, c
		}
	}
	t.stats.InsertFailed++
	t.stats.Drop++
	return ctInsertFailed, winner
}

// allowClash is the kernel's l4proto allow_clash: the protocols whose insert races
// nf_ct_resolve_clash may resolve.
func allowClash(proto uint8) bool { return proto == netfilter.ProtoUDP }

// insertLocked puts a new entry into the table (by its original tuple too when orig)
// and queues it for collection.
func (t *Conntrack) insertLocked(c *Conn, orig bool) {
	if orig {
		t.table.put(c.Orig, ctRef{c: c})
	}
	t.table.put(c.Reply, ctRef{c: c, reply: true})
	t.queueNewLocked(c)
}

// queueNewLocked is the rest of an insertion once the table maps the entry's tuples:
// it counts it, marks it confirmed and queues it for collection.
func (t *Conntrack) queueNewLocked(c *Conn) {
	t.stats.Insert++
	c.Status |= netfilter.StatusConfirmed
	c.queued = true
	at := c.Expires.UnixNano()
	t.expq.push(expItem{at: at, c: c})
	t.expMax = max(t.expMax, at)
	t.queuedLocked()
}

// tupleTaken reports whether a confirmed entry other than c uses tu in either direction.
func (t *Conntrack) tupleTaken(tu netfilter.Tuple, c *Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tupleTakenLocked(tu, c)
}

// tupleTakenLocked is tupleTaken for a caller that holds the table's lock.
func (t *Conntrack) tupleTakenLocked(tu netfilter.Tuple, c *Conn) bool {
	r, ok := t.lookupLocked(tu, t.now())
	if ok && r.c != c {
		t.stats.Found++ // as nf_conntrack_tuple_taken counts it
		return true
	}
	return false
}

// Entries returns a snapshot of the live entries, ordered by ID.
func (t *Conntrack) Entries() []Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var out []Conn
	for _, c := range t.table.conns() {
		if now.Before(c.Expires) && c.Status&statusNATClash == 0 { // the kernel hides clash entries from conntrack -L
			out = append(out, *c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Len returns the number of live entries.
func (t *Conntrack) Len() int { return len(t.Entries()) }

// CtFilter selects entries the way the conntrack tool's -L/-D options do. Zero fields
// match anything (the tool itself defaults -f to ipv4; a zero Family takes both).
type CtFilter struct {
	Family       uint8              // -f: 4 (ipv4) or 6 (ipv6)
	Proto        uint8              // -p
	OrigSrc      netip.Addr         // -s, --orig-src
	OrigDst      netip.Addr         // -d, --orig-dst
	OrigSrcPort  uint16             // --sport, --orig-port-src
	OrigDstPort  uint16             // --dport, --orig-port-dst
	ReplySrc     netip.Addr         // -r, --reply-src
	ReplyDst     netip.Addr         // -q, --reply-dst
	ReplySrcPort uint16             // --reply-port-src
	ReplyDstPort uint16             // --reply-port-dst
	Mark         *uint32            // -m, --mark
	Status       netfilter.CtStatus // --status: all these bits set
	TCPState     *TCPState          // --state (TCP entries in this state)
}

// Match reports whether c passes the filter.
func (f CtFilter) Match(c *Conn) bool {
	switch {
	case f.Family == 4 && !c.Orig.Src.Unmap().Is4(),
		f.Family == 6 && c.Orig.Src.Unmap().Is4(),
		f.TCPState != nil && (c.Orig.Proto != netfilter.ProtoTCP || c.TCPState != *f.TCPState),
		f.Proto != 0 && c.Orig.Proto != f.Proto,
		f.OrigSrc.IsValid() && c.Orig.Src != f.OrigSrc,
		f.OrigDst.IsValid() && c.Orig.Dst != f.OrigDst,
		f.OrigSrcPort != 0 && c.Orig.SrcPort != f.OrigSrcPort,
		f.OrigDstPort != 0 && c.Orig.DstPort != f.OrigDstPort,
		f.ReplySrc.IsValid() && c.Reply.Src != f.ReplySrc,
		f.ReplyDst.IsValid() && c.Reply.Dst != f.ReplyDst,
		f.ReplySrcPort != 0 && c.Reply.SrcPort != f.ReplySrcPort,
		f.ReplyDstPort != 0 && c.Reply.DstPort != f.ReplyDstPort,
		f.Mark != nil && c.Mark != *f.Mark,
		f.Status != 0 && !c.Has(f.Status):
		return false
	}
	return true
}

// List returns the live entries the filter matches.
func (t *Conntrack) List(f CtFilter) []Conn {
	var out []Conn
	for _, c := range t.Entries() {
		if f.Match(&c) {
			out = append(out, c)
		}
	}
	return out
}

// Delete removes the entries the filter matches and returns how many it removed.
func (t *Conntrack) Delete(f CtFilter) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.table.conns() {
		if f.Match(c) {
			t.removeLocked(c)
			n++
		}
	}
	t.compactQueueLocked()
	t.table.release()
	return n
}

// Flush removes every entry (conntrack -F).
func (t *Conntrack) Flush() int {
	return t.Delete(CtFilter{})
}

// ---- TCP state machine (net/netfilter/nf_conntrack_proto_tcp.c) ----

const (
	tcpSynSet = iota
	tcpSynAckSet
	tcpFinSet
	tcpAckSet
	tcpRstSet
	tcpNoneSet
)

func tcpIndex(flags uint8) int {
	switch {
	case flags&netfilter.TCPRst != 0:
		return tcpRstSet
	case flags&netfilter.TCPSyn != 0 && flags&netfilter.TCPAck != 0:
		return tcpSynAckSet
	case flags&netfilter.TCPSyn != 0:
		return tcpSynSet
	case flags&netfilter.TCPFin != 0:
		return tcpFinSet
	case flags&netfilter.TCPAck != 0:
		return tcpAckSet
	}
	return tcpNoneSet
}

const (
	sNO = TCPNone
	sSS = TCPSynSent
	sSR = TCPSynRecv
	sES = TCPEstablished
	sFW = TCPFinWait
	sCW = TCPCloseWait
	sLA = TCPLastAck
	sTW = TCPTimeWait
	sCL = TCPClose
	sS2 = TCPSynSent2
	sIV = tcpMax
	sIG = tcpIgnore
)

// tcpTransitions is the kernel's tcp_conntracks table: [direction][flags][old state].
var tcpTransitions = [2][6][10]TCPState{
	{ // ORIGINAL
		/*syn*/ {sSS, sSS, sIG, sIG, sIG, sIG, sIG, sSS, sSS, sS2},
		/*synack*/ {sIV, sIV, sSR, sIV, sIV, sIV, sIV, sIV, sIV, sSR},
		/*fin*/ {sIV, sIV, sFW, sFW, sLA, sLA, sLA, sTW, sCL, sIV},
		/*ack*/ {sES, sIV, sES, sES, sCW, sCW, sTW, sTW, sCL, sIV},
		/*rst*/ {sIV, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL},
		/*none*/ {sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
	},
	{ // REPLY
		/*syn*/ {sIV, sS2, sIV, sIV, sIV, sIV, sIV, sSS, sIV, sS2},
		/*synack*/ {sIV, sSR, sIG, sIG, sIG, sIG, sIG, sIG, sIG, sSR},
		/*fin*/ {sIV, sIV, sFW, sFW, sLA, sLA, sLA, sTW, sCL, sIV},
		/*ack*/ {sIV, sIG, sSR, sES, sCW, sCW, sTW, sTW, sCL, sIG},
		/*rst*/ {sIV, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL},
		/*none*/ {sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
	},
}

func seqBefore(a, b uint32) bool { return int32(a-b) < 0 }
func seqAfter(a, b uint32) bool  { return seqBefore(b, a) }

// tcpPacketLocked runs the state machine and the window check for a packet of c in
// direction dir. It returns the new state, whether the packet is valid (not INVALID), and
// whether the packet reopens a closed connection (the caller then starts a new entry).
func (t *Conntrack) tcpPacketLocked(c *Conn, dir int, p *Packet, now time.Time) (TCPState, bool, bool) {
	return t.tcpSegmentLocked(c, dir, p, segOf(p), now)
}

// tcpSeg is what the TCP state machine and window check read of a segment besides its
// options: flags, sequence and acknowledgement numbers, window, and the sequence numbers
// it uses (payload, SYN, FIN).
type tcpSeg struct {
	flags    uint8
	seq, ack uint32
	win      uint16
	seqLen   uint32
}

func segOf(p *Packet) tcpSeg {
	seq, ack, win := p.TCPSeq()
	return tcpSeg{flags: p.TCPFlags, seq: seq, ack: ack, win: win, seqLen: p.tcpSeqLen()}
}

// tcpSegmentLocked is tcpPacketLocked for segment s, whose header (read for its options
// only when s is a SYN) is p's: a train's segments (train.go) are walked through it one
// by one without being built.
func (t *Conntrack) tcpSegmentLocked(c *Conn, dir int, p *Packet, s tcpSeg, now time.Time) (TCPState, bool, bool) {
	idx := tcpIndex(s.flags)
	old := c.TCPState
	next := tcpTransitions[dir][idx][old]
	switch next {
	case sSS:
		// A SYN on a closed or time-waiting connection reopens it (RFC 1122).
		if old == sTW || old == sCL {
			return old, false, true
		}
	case sIG:
		// The kernel lets ignored packets through without changing the state.
		return old, true, false
	case sIV:
		return old, false, false
	}
	if !t.tcpInWindow(c, dir, p, s) {
		return old, false, false
	}
	if idx == tcpRstSet || idx == tcpFinSet {
		c.tcp[dir].flags |= tcpFlagCloseInit
	}
	c.TCPState = next
	if dir == 1 {
		c.Status |= netfilter.StatusSeenReply
	}
	if c.Has(netfilter.StatusSeenReply) && !c.Has(netfilter.StatusAssured) && (old == sSR || old == sS2 || old == sES) && next == sES {
		c.Status |= netfilter.StatusAssured
	}
	timeout := t.settings.tcpTimeout(next)
	if (c.tcp[0].flags|c.tcp[1].flags)&tcpFlagDataUnacked != 0 {
		if u := orDefault(t.settings.TCPUnack, 5*time.Minute); u < timeout {
			timeout = u
		}
	}
	t.setTimeout(c, now, timeout)
	return next, true, false
}

// tcpInWindow is the kernel's tcp_in_window, without SACK blocks and NAT sequence offsets.
// s is the segment (segOf(p) but for a train's); p's header is read for SYN options.
func (t *Conntrack) tcpInWindow(c *Conn, dir int, p *Packet, s tcpSeg) bool {
	sender, receiver := &c.tcp[dir], &c.tcp[1-dir]
	seq, ack := s.seq, s.ack
	win := uint32(s.win)
	sack := ack
	end := seq + s.seqLen
	syn := s.flags&netfilter.TCPSyn != 0
	hasAck := s.flags&netfilter.TCPAck != 0
	rst := s.flags&netfilter.TCPRst != 0

	if sender.maxwin == 0 {
		// First packet seen in this direction.
		if syn {
			sender.end, sender.maxend = end, end
			sender.maxwin = max(win, 1)
			sender.scale, sender.flags = tcpOptions(p)
			// RFC 1323: scaling only when both sides offer it, decided at the answer
			// (the kernel's tcp_new takes a connection's first SYN, options and all,
			// before tcp_in_window sees the other side).
			if receiver.maxwin != 0 && sender.flags&receiver.flags&tcpFlagWindowScale == 0 {
				sender.scale, receiver.scale = 0, 0
			}
			if !hasAck {
				return true
			}
		} else {
			// Mid-stream pickup (nf_conntrack_tcp_loose).
			if receiver.maxwin == 0 && c.TCPState == TCPNone {
				// The connection's first packet (tcp_new): "We assume SACK and liberal
				// window checking to handle window scaling", both directions.
				sender.flags = tcpFlagSACKPerm | tcpFlagBeLiberal
				receiver.flags = tcpFlagSACKPerm | tcpFlagBeLiberal
			}
			sender.end = end
			swin := win << sender.scale
			sender.maxwin = max(swin, 1)
			sender.maxend = end + sender.maxwin
			if receiver.maxwin == 0 {
				receiver.end, receiver.maxend = sack, sack
			} else if sack == receiver.end+1 {
				receiver.end++
			}
		}
	} else if (c.TCPState == TCPSynSent && dir == 0 || c.TCPState == TCPSynRecv && dir == 1) && seqAfter(end, sender.end) {
		// Retransmitted SYN/SYN-ACK with a new ISN: start over.
		sender.end, sender.maxend = end, end
		sender.maxwin = max(win, 1)
		sender.scale, sender.flags = tcpOptions(p)
	}
	if !hasAck {
		ack, sack = receiver.end, receiver.end
	} else if rst && ack == 0 {
		ack, sack = receiver.end, receiver.end
	}
	if rst && seq == 0 && c.TCPState == TCPSynSent {
		seq, end = sender.end, sender.end
	}
	maxAckWin := uint32(66000)
	if sender.maxwin > maxAckWin {
		maxAckWin = sender.maxwin
	}
	inRecvWin := receiver.maxwin == 0 || seqAfter(end, sender.end-receiver.maxwin-1)
	ok := seqBefore(seq, sender.maxend+1) && inRecvWin &&
		seqBefore(sack, receiver.end+1) && seqAfter(sack, receiver.end-maxAckWin-1)
	if !ok {
		return (t.settings.TCPBeLiberal || sender.flags&tcpFlagBeLiberal != 0) && !rst
	}
	if !syn {
		win <<= sender.scale
	}
	if swin := win + (sack - ack); sender.maxwin < swin {
		sender.maxwin = swin
	}
	if seqAfter(end, sender.end) {
		sender.end = end
		sender.flags |= tcpFlagDataUnacked
	}
	if hasAck {
		if sender.flags&tcpFlagMaxAckSet == 0 {
			sender.maxack = ack
			sender.flags |= tcpFlagMaxAckSet
		} else if seqAfter(ack, sender.maxack) {
			sender.maxack = ack
		}
	}
	if receiver.maxwin != 0 && seqAfter(end, sender.maxend) {
		receiver.maxwin += end - sender.maxend
	}
	if seqAfter(sack+win, receiver.maxend-1) {
		receiver.maxend = sack + win
		if win == 0 {
			receiver.maxend++
		}
	}
	if ack == receiver.end {
		receiver.flags &^= tcpFlagDataUnacked
	}
	return true
}

// tcpOptions reads the window-scale and SACK-permitted options of a segment.
func tcpOptions(p *Packet) (scale uint8, flags uint8) {
	l4 := p.Data[p.l4off:]
	hl := int(l4[12]>>4) * 4
	if hl > len(l4) {
		return 0, 0
	}
	opts := l4[20:hl]
	for len(opts) > 0 {
		switch opts[0] {
		case 0:
			return
		case 1:
			opts = opts[1:]
			continue
		}
		if len(opts) < 2 || opts[1] < 2 || int(opts[1]) > len(opts) {
			return
		}
		switch {
		case opts[0] == 4 && opts[1] == 2:
			flags |= tcpFlagSACKPerm
		case opts[0] == 3 && opts[1] == 3:
			scale = min(opts[2], 14)
			flags |= tcpFlagWindowScale
		}
		opts = opts[opts[1]:]
	}
	return
}
