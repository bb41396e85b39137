package emulator

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// connKey is the hash key of the connection table: protocol and client address and port
// (ip_vs_conn_hashkey); the virtual address and port are compared within the chain.
type connKey struct {
	proto uint8
	caddr netip.Addr
	cport uint16
}

// conn is struct ip_vs_conn: a connection entry or a persistence template.
type conn struct {
	proto    uint8
	caddr    netip.Addr
	cport    uint16
	vaddr    netip.Addr // for fwmark templates: the mark as an IPv4 address
	vport    uint16
	daddr    netip.Addr
	dport    uint16
	dest     *dest
	fwd      ipvs.ForwardMethod
	fwmark   uint32
	template bool
	inactive bool // IP_VS_CONN_F_INACTIVE
	noOutput bool // IP_VS_CONN_F_NOOUTPUT
	onePkt   bool // IP_VS_CONN_F_ONE_PACKET
	bypass   bool // IP_VS_CONN_F_BYPASS
	nfct     bool // IP_VS_CONN_F_NFCT
	hashed   bool
	state    int
	assured  bool // template state IP_VS_CTPL_S_ASSURED
	timeout  time.Duration
	expires  time.Time

	timerPending bool
	timerGen     uint64 // generation of the live queue event
	setSeq       uint64 // order of the last modTimer
	evAt         time.Time

	next     *conn // the next (older) entry of its hash chain
	control  *conn
	nControl int
	inPkts   int
	seq      uint64
	freed    bool
}

func (c *conn) key() connKey { return connKey{c.proto, c.caddr, c.cport} }

// ---- hashing ----

func (m *Model) table(tpl bool) map[connKey]*conn {
	if tpl {
		return m.tpls
	}
	return m.conns
}

// hash is ip_vs_conn_hash(): add at the head of the chain (a list through conn.next, as
// the kernel's hlist: no allocation per entry). One-packet entries are never hashed.
func (m *Model) hash(c *conn) {
	if c.onePkt || c.hashed {
		return
	}
	t := m.table(c.template)
	k := c.key()
	c.next = t[k]
	t[k] = c
	c.hashed = true
}

func (m *Model) unhash(c *conn) {
	if !c.hashed {
		return
	}
	t := m.table(c.template)
	k := c.key()
	if head := t[k]; head == c {
		if c.next == nil {
			delete(t, k)
		} else {
			t[k] = c.next
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == c {
				p.next = c.next
				break
			}
		}
	}
	c.next = nil
	c.hashed = false
}

// connInGet is ip_vs_conn_in_get(): the newest entry of the client's chain for this
// virtual address and port.
func (m *Model) connInGet(proto uint8, caddr netip.Addr, cport uint16, vaddr netip.Addr, vport uint16) *conn {
	for c := m.conns[connKey{proto, caddr, cport}]; c != nil; c = c.next {
		if c.vport == vport && c.vaddr == vaddr {
			return c
		}
	}
	return nil
}

// ctInGet is ip_vs_ct_in_get(): a template for (protocol, client net, vaddr, vport).
func (m *Model) ctInGet(proto uint8, cnet netip.Addr, vaddr netip.Addr, vport uint16) *conn {
	for c := m.tpls[connKey{proto, cnet, 0}]; c != nil; c = c.next {
		if c.vport == vport && c.vaddr == vaddr {
			return c
		}
	}
	return nil
}

// connOutGet is ip_vs_conn_out_get(): a reply from src (the real server, or the virtual
// address for DR/TUN) to dst (the client).
func (m *Model) connOutGet(proto uint8, src, dst netip.AddrPort) *conn {
	for c := m.conns[connKey{proto, dst.Addr(), dst.Port()}]; c != nil; c = c.next {
		saddr, sport := c.daddr, c.dport
		if c.fwd != ipvs.Masquerade {
			saddr, sport = c.vaddr, c.vport
		}
		if sport == src.Port() && saddr == src.Addr() {
			return c
		}
	}
	return nil
}

// ---- timers ----

// modTimer is mod_timer(): the entry expires at at. Timers due at the same instant fire
// in the order they were set. The queue holds at most one live event per entry: a later
// deadline is picked up when the earlier event fires (fireConnTimer), so refreshing an
// entry on every packet costs no heap operation.
func (m *Model) modTimer(c *conn, at time.Time) {
	m.evSeq++
	c.setSeq = m.evSeq
	c.timerPending = true
	c.expires = at
	if c.evAt.IsZero() || at.Before(c.evAt) {
		m.pushConnEvent(c)
	}
}

func (m *Model) pushConnEvent(c *conn) {
	c.timerGen++
	c.evAt = c.expires
	m.events.push(event{at: c.expires, seq: c.setSeq, kind: evConnExpire, conn: c, gen: c.timerGen})
}

// fireConnTimer handles a connection event that came due.
func (m *Model) fireConnTimer(e *event) {
	c := e.conn
	if c.timerGen != e.gen {
		return // superseded by an earlier deadline
	}
	c.evAt = time.Time{}
	if !c.timerPending || c.freed {
		return
	}
	if !c.expires.Equal(e.at) || c.setSeq != e.seq {
		m.pushConnEvent(c) // the deadline moved later (or was set again) since
		return
	}
	c.timerPending = false
	m.connExpire(c)
}

func (m *Model) timerDelete(c *conn) bool {
	if !c.timerPending {
		return false
	}
	c.timerPending = false
	return true
}

// connPut is ip_vs_conn_put(): restart the timer with the entry's timeout, or expire a
// one-packet entry at once.
func (m *Model) connPut(c *conn) {
	if c.freed {
		return
	}
	if c.onePkt && !c.timerPending {
		m.connExpire(c)
		return
	}
	t := c.timeout
	if c.onePkt {
		t = 0
	}
	m.modTimer(c, m.now.Add(t))
}

// expireNow is ip_vs_conn_expire_now(): make a pending timer fire now.
func (m *Model) expireNow(c *conn) {
	if c.timerPending && c.expires.After(m.now) {
		m.modTimer(c, m.now)
	}
}

// connDel is ip_vs_conn_del(): delete the timer and expire the entry at once; an entry
// with a controller is marked (timeout 0) so that its non-assured template goes too.
func (m *Model) connDel(c *conn) {
	if m.timerDelete(c) {
		if c.control != nil {
			c.timeout = 0
		}
		m.connExpire(c)
	}
}

// connExpire is ip_vs_conn_expire(): the timer fired.
func (m *Model) connExpire(c *conn) {
	if c.freed {
		return
	}
	if c.nControl > 0 {
		// expire_later: a template (or FTP control) still controls entries.
		c.timeout = 60 * time.Second
		m.modTimer(c, m.now.Add(c.timeout))
		return
	}
	m.timerDelete(c)
	m.unhash(c)
	if ct := c.control; ct != nil {
		hasRef := c.timeout == 0 && !ct.freed
		c.control = nil
		ct.nControl--
		if hasRef && ct.nControl == 0 && (!ct.template || !ct.assured) {
			m.connDel(ct)
		}
	}
	m.unbindDest(c)
	c.freed = true
	if !c.template {
		m.stats.ConnsGone++
	}
}

// ---- destination binding ----

// bindDest is ip_vs_bind_dest().
func (m *Model) bindDest(c *conn, d *dest) {
	if d == nil {
		return
	}
	d.refs++
	c.dest = d
	c.fwd = d.fwd
	c.inactive = true
	c.noOutput = d.fwd != ipvs.Masquerade
	if !c.template {
		d.inactive++
	} else {
		d.persist++
	}
	if d.uThresh != 0 && uint32(d.total()) >= d.uThresh && !(m.picking && !c.template) {
		d.overload = true
	}
}

// updateOverload is ip_vs_dest_update_overload(): OVERLOAD set once the connections
// reach the upper threshold, cleared below the lower one (75% of the upper, rounded as
// u - u>>2, when there is none) or with no upper threshold, kept in between.
func (d *dest) updateOverload() {
	if d.uThresh == 0 {
		d.overload = false
		return
	}
	total := uint32(d.total())
	if total >= d.uThresh {
		d.overload = true
		return
	}
	l := d.lThresh
	if l == 0 {
		l = d.uThresh - d.uThresh>>2
	}
	if total < l {
		d.overload = false
	}
}

// unbindDest is ip_vs_unbind_dest().
func (m *Model) unbindDest(c *conn) {
	d := c.dest
	if d == nil {
		return
	}
	if !c.template {
		if c.inactive {
			d.inactive--
		} else {
			d.active--
		}
	} else {
		d.persist--
	}
	switch {
	case d.lThresh != 0:
		if uint32(d.total()) < d.lThresh {
			d.overload = false
		}
	case d.uThresh != 0:
		if uint32(d.total())*4 < d.uThresh*3 {
			d.overload = false
		}
	default:
		d.overload = false
	}
	d.refs--
}

// connNew is ip_vs_conn_new(): create, bind to dest and hash an entry. The timer starts
// at the first connPut.
func (m *Model) connNew(proto uint8, caddr netip.Addr, cport uint16, vaddr netip.Addr, vport uint16,
	daddr netip.Addr, dport uint16, template, onePkt bool, d *dest, fwmark uint32) *conn {
	m.connSeq++
	c := &conn{proto: proto, caddr: caddr, cport: cport, vaddr: vaddr, vport: vport, daddr: daddr,
		dport: dport, template: template, onePkt: onePkt, fwmark: fwmark, seq: m.connSeq}
	m.bindDest(c, d)
	c.state = 0
	c.timeout = 3 * time.Second
	if m.sys.Conntrack {
		c.nfct = true
	}
	m.hash(c)
	if template {
		m.stats.TplsMade++
	} else {
		m.stats.ConnsMade++
	}
	return c
}

// ---- state transitions ----

func (m *Model) tcpIsActive(state int) bool {
	if m.cfg.LegacyActiveConns {
		return state == tcpEstablished
	}
	return state < tcpLast && tcpActive[state]
}

// setActive moves the entry between the destination's active and inactive counters.
func (m *Model) setActive(c *conn, active bool) {
	d := c.dest
	if d == nil {
		return
	}
	if !c.inactive && !active {
		d.active--
		d.inactive++
		c.inactive = true
	} else if c.inactive && active {
		d.active++
		d.inactive--
		c.inactive = false
	}
}

// assureCT is ip_vs_control_assure_ct().
func assureCT(c *conn) {
	if ct := c.control; ct != nil && ct.template {
		ct.assured = true
	}
}

// setState is ip_vs_set_state(): the protocol's state_transition.
func (m *Model) setState(c *conn, dir int, p *Packet) {
	switch c.proto {
	case netfilter.ProtoTCP:
		if c.noOutput {
			if dir == dirOutput {
				c.noOutput = false
			} else {
				dir = dirInputOnly
			}
		}
		newState := tcpClose
		if idx := tcpStateIdx(p.TCPFlags); idx >= 0 {
			newState = int(tcpStates[dir*4+idx][c.state])
		}
		if newState != c.state {
			m.setActive(c, m.tcpIsActive(newState))
			if newState == tcpEstablished {
				assureCT(c)
			}
		}
		c.state = newState
		c.timeout = m.tcpTimeouts[newState]
	case netfilter.ProtoUDP:
		c.timeout = m.udpTimeout
		if dir == dirOutput {
			assureCT(c)
		}
	case netfilter.ProtoSCTP:
		ev := sctpEvent(p.SCTPChunk)
		if c.noOutput {
			if dir == dirOutput {
				c.noOutput = false
			} else {
				dir = dirInputOnly
			}
		}
		next := int(sctpStates[dir][ev][c.state])
		if next != c.state {
			m.setActive(c, next == sctpEstablished)
			if next == sctpEstablished {
				assureCT(c)
			}
		}
		c.state = next
		c.timeout = m.sctpTimeouts[next]
	}
}

// ---- the packet path ----

// Packet is what the IPVS hooks look at in a packet.
type Packet struct {
	Protocol  uint8 // ProtoTCP, ProtoUDP or ProtoSCTP
	Src, Dst  netip.AddrPort
	Mark      uint32 // skb->mark (fwmark services)
	TCPFlags  uint8  // TCPSyn, TCPAck, TCPFin, TCPRst bits
	SCTPChunk uint8  // type of the first chunk (SCTPInit, SCTPData, ...)
	// LocalOut marks a packet generated on this node (the LOCAL_OUT hook): IPVS then
	// does not schedule it if it is a reply of an existing connection.
	LocalOut bool
	// ConfirmedConntrack tells that the packet matched a confirmed netfilter conntrack
	// entry (the datapath's conntrack knows). A SYN that must reschedule a reused entry
	// is then dropped so that conntrack can forget the old flow and the client's
	// retransmission is scheduled afresh (ip_vs_conn_uses_old_conntrack, Linux 5.9+).
	ConfirmedConntrack bool
	// Len is the IP packet's length in bytes, which IPVS adds to its byte statistics
	// (ipvsadm -Ln --stats); 0 counts the packet but no bytes.
	Len int
}

func (p *Packet) String() string {
	return fmt.Sprintf("%s %s -> %s", protoName(p.Protocol), p.Src, p.Dst)
}

// Verdict is what IPVS does with a packet.
type Verdict uint8

const (
	// VerdictAccept: the packet is not for IPVS (no connection and no service, or a
	// packet that may not start a connection); it continues to the local stack.
	VerdictAccept Verdict = iota
	// VerdictForward: the packet goes to Decision.Dest by Decision.Forward (Masquerade
	// rewrites the destination to Dest; an Out decision rewrites the source to Dest).
	VerdictForward
	// VerdictDrop: the packet is dropped.
	VerdictDrop
	// VerdictReject: no destination is available; IPVS sends ICMP port unreachable (for
	// TCP too) and drops the packet.
	VerdictReject
	// VerdictBypass: cache_bypass: the packet is forwarded to its original destination.
	VerdictBypass
)

func (v Verdict) String() string {
	switch v {
	case VerdictAccept:
		return "accept"
	case VerdictForward:
		return "forward"
	case VerdictDrop:
		return "drop"
	case VerdictReject:
		return "reject"
	case VerdictBypass:
		return "bypass"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Via says how a destination was found.
type Via uint8

const (
	ViaNone       Via = iota
	ViaConnection     // an existing connection entry
	ViaTemplate       // a persistence template (the scheduler was not asked)
	ViaScheduler      // the service's scheduler
)

func (v Via) String() string {
	switch v {
	case ViaConnection:
		return "connection"
	case ViaTemplate:
		return "template"
	case ViaScheduler:
		return "scheduler"
	}
	return "none"
}

// Decision is the outcome of a packet (or of a dry-run schedule).
type Decision struct {
	Verdict Verdict
	Service *ipvs.VirtualServer // the virtual service involved, if any (shared: do not modify)
	Dest    netip.AddrPort      // see VerdictForward
	Forward ipvs.ForwardMethod
	Via     Via
	New     bool       // a connection entry was created
	Conn    *ConnEntry // the entry after the packet, if one exists
	Reason  string     // a one-line explanation for traces
	// OldConntrack: the packet was dropped because it carries a confirmed conntrack
	// entry of the old flow (Packet.ConfirmedConntrack) that IPVS cannot redirect; the
	// old connection entry is expired (its conntrack entry dropped with it), so the
	// client's retransmitted SYN or INIT is scheduled afresh.
	OldConntrack bool
}

// In is the IPVS LOCAL_IN/LOCAL_OUT hook (ip_vs_in) for a packet from a client towards
// a virtual service: it looks up or creates the connection entry, moves its state and
// counters, and says where the packet goes. The virtual clock's current time applies.
func (m *Model) In(p Packet) Decision {
	p.unmap()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	return m.in(&p)
}

// InAt is In for a packet whose time the caller has already read from the model's clock
// (a datapath reads it once per packet): the model does not read its clock again. now
// before the model's time counts as the model's time, as in In.
func (m *Model) InAt(p Packet, now time.Time) Decision {
	p.unmap()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.syncAt(now)
	return m.in(&p)
}

// PeekInAt tells what InAt would decide for p, a packet that does not start a
// connection (no SYN, no INIT), when InAt would send it on by an existing entry
// (VerdictForward to the entry's real server, or VerdictBypass): ok false when p starts
// a connection, or no entry sends it on (none, or one of a removed real server). Such a
// decision depends on the entry alone, not on the packet's flags or length, so every
// later packet of the entry gets it too until something else changes the entry. It
// changes nothing but running the model's events up to now, as InAt does first.
func (m *Model) PeekInAt(p Packet, now time.Time) (Decision, bool) {
	p.unmap()
	switch p.Protocol {
	case netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP:
	default:
		return Decision{}, false
	}
	if isNewConn(&p) {
		return Decision{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.syncAt(now)
	c := m.connInGet(p.Protocol, p.Src.Addr(), p.Src.Port(), p.Dst.Addr(), p.Dst.Port())
	if c == nil || c.dest != nil && !c.dest.available {
		return Decision{}, false
	}
	dec := Decision{Via: ViaConnection, Verdict: VerdictForward, Dest: netip.AddrPortFrom(c.daddr, c.dport), Forward: c.fwd}
	if c.bypass {
		dec.Verdict, dec.Dest, dec.Forward = VerdictBypass, netip.AddrPortFrom(c.vaddr, c.vport), 0
	}
	return dec, true
}

// InRunAt is InAt for a run of a connection's packets, mid n times and then last once
// (a train's segments), at one time, without the decisions: what n+1 InAt calls would
// do to the model. OutRunAt is the same for replies (OutAt).
func (m *Model) InRunAt(mid Packet, n int, last Packet, now time.Time) {
	m.runAt(false, mid, n, last, now)
}

// OutRunAt is OutAt for a run of replies: see InRunAt.
func (m *Model) OutRunAt(mid Packet, n int, last Packet, now time.Time) {
	m.runAt(true, mid, n, last, now)
}

func (m *Model) runAt(out bool, mid Packet, n int, last Packet, now time.Time) {
	mid.unmap()
	last.unmap()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.noEntries = true
	defer func() { m.noEntries = false }()
	for i := range n + 1 {
		q := mid
		if i == n {
			q = last
		}
		m.syncAt(now)
		if out {
			m.out(&q)
		} else {
			m.in(&q)
		}
	}
}

// unmap turns IPv4-mapped IPv6 addresses into IPv4 ones.
func (p *Packet) unmap() {
	if p.Src.Addr().Is4In6() {
		p.Src = netip.AddrPortFrom(p.Src.Addr().Unmap(), p.Src.Port())
	}
	if p.Dst.Addr().Is4In6() {
		p.Dst = netip.AddrPortFrom(p.Dst.Addr().Unmap(), p.Dst.Port())
	}
}

// Out is the IPVS hook for replies (ip_vs_out): a packet from a real server back to a
// client of a masqueraded connection. It moves the entry's state and returns the virtual
// address the reply's source is rewritten to (VerdictForward), or VerdictAccept when the
// packet belongs to no connection.
func (m *Model) Out(p Packet) Decision {
	return m.OutAt(p, time.Time{})
}

// OutAt is Out for a packet whose time the caller has already read from the model's
// clock (see InAt); the zero time: read the clock.
func (m *Model) OutAt(p Packet, now time.Time) Decision {
	p.unmap()
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.IsZero() {
		m.sync()
	} else {
		m.syncAt(now)
	}
	return m.out(&p)
}

// out is OutAt after the clock.
func (m *Model) out(p *Packet) Decision {
	c := m.connOutGet(p.Protocol, p.Src, p.Dst)
	if c == nil {
		return Decision{Verdict: VerdictAccept, Reason: "no IPVS connection for this reply"}
	}
	countPacket(c, p, true)
	m.setState(c, dirOutput, p)
	m.connPut(c)
	dec := Decision{Verdict: VerdictForward, Dest: netip.AddrPortFrom(c.vaddr, c.vport), Forward: c.fwd,
		Via: ViaConnection, Reason: "reply of an existing connection"}
	if !m.noEntries {
		dec.Conn = m.entry(c)
	}
	if c.dest != nil && c.dest.svc != nil {
		dec.Service = c.dest.svc.virtualServer()
	}
	return dec
}

// Pick schedules a new connection's first packet (p is made a SYN or an INIT) as In
// does for a tuple without an entry: the scheduler's state moves (rr and wrr cursors,
// lblc and lblcr caches, twos draws), persistence templates are used or made, and
// cache_bypass applies, but no connection entry is added, so a captured sequence of
// scheduler decisions can be replayed one at a time. Entries of the tuple are not
// consulted; Schedule is the dry run that changes nothing.
func (m *Model) Pick(p Packet) Decision {
	p.unmap()
	switch p.Protocol {
	case netfilter.ProtoTCP:
		p.TCPFlags = netfilter.TCPSyn
	case netfilter.ProtoSCTP:
		p.SCTPChunk = SCTPInit
	case netfilter.ProtoUDP:
	default:
		return Decision{Verdict: VerdictAccept, Reason: "protocol not handled by IPVS"}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	m.picking = true
	c, dec, ok := m.tryToSchedule(&p)
	m.picking = false
	if !ok {
		return dec
	}
	if c.bypass {
		dec.Verdict, dec.Dest = VerdictBypass, netip.AddrPortFrom(c.vaddr, c.vport)
	} else {
		dec.Verdict, dec.Dest, dec.Forward = VerdictForward, netip.AddrPortFrom(c.daddr, c.dport), c.fwd
	}
	m.discard(c)
	dec.Reason = strings.Replace(dec.Reason, "new connection ", "picked ", 1) + " (no connection entry)"
	return dec
}

// discard undoes connNew for an entry Pick made: unhashed, released by its template
// and its destination, never counted.
func (m *Model) discard(c *conn) {
	m.unhash(c)
	if ct := c.control; ct != nil {
		c.control = nil
		ct.nControl--
	}
	if d := c.dest; d != nil {
		d.inactive--
		d.refs--
		c.dest = nil
	}
	c.freed = true
	m.stats.ConnsMade--
}

// Schedule answers "where would a new connection for this packet go now?" without
// changing anything: no entry, no template, no scheduler state (rr cursor, wrr weight,
// lblc cache, twos random draws). Persistence templates are consulted.
func (m *Model) Schedule(p Packet) Decision {
	p.unmap()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	svc := m.findService(p.Dst.Addr().Is6(), p.Mark, p.Protocol, p.Dst.Addr(), p.Dst.Port())
	if svc == nil {
		return Decision{Verdict: VerdictAccept, Reason: "no virtual service for " + p.Dst.String()}
	}
	dec := Decision{Service: svc.virtualServer()}
	in := schedInput{saddr: p.Src.Addr(), daddr: p.Dst.Addr(), sport: p.Src.Port(), proto: p.Protocol}
	var d *dest
	if svc.persistent() {
		snet, vaddr, vport, proto := m.templateParams(svc, &p)
		if ct := m.ctInGet(proto, snet, vaddr, vport); ct != nil && m.templateValid(ct) {
			d, dec.Via = ct.dest, ViaTemplate
		}
	} else if svc.key.fwmark == 0 && p.Dst.Port() != svc.key.port {
		dec.Verdict, dec.Reason = VerdictReject, "port-zero service is not persistent"
		return dec
	}
	if d == nil && svc.sched != nil {
		d, dec.Via = svc.sched.schedule(m, svc, &in, true), ViaScheduler
	}
	if d == nil {
		dec.Verdict, dec.Via, dec.Reason = VerdictReject, ViaNone, "no destination available ("+svc.schedLabel()+")"
		return dec
	}
	dport := p.Dst.Port()
	if svc.persistent() {
		if dport == svc.key.port && d.port != 0 {
			dport = d.port
		}
	} else if d.port != 0 {
		dport = d.port
	}
	dec.Verdict, dec.Dest, dec.Forward = VerdictForward, netip.AddrPortFrom(d.addr, dport), d.fwd
	dec.Reason = "would be chosen by " + dec.Via.String()
	return dec
}

func (s *service) schedLabel() string {
	if s.sched == nil {
		return "no scheduler"
	}
	return s.schedName
}

// isNewConn: a TCP SYN or an SCTP INIT.
func isNewConn(p *Packet) bool {
	switch p.Protocol {
	case netfilter.ProtoTCP:
		return p.TCPFlags&netfilter.TCPSyn != 0
	case netfilter.ProtoSCTP:
		return p.SCTPChunk == SCTPInit
	}
	return false
}

// newConnName names the packet that starts a connection: SYN or INIT.
func newConnName(p *Packet) string {
	if p.Protocol == netfilter.ProtoSCTP {
		return "INIT"
	}
	return "SYN"
}

// isNewConnExpected is is_new_conn_expected(): may a SYN reuse this entry's tuple?
func isNewConnExpected(c *conn, mode int) bool {
	if c.control != nil {
		return false
	}
	switch c.proto {
	case netfilter.ProtoTCP:
		return c.state == tcpTimeWait || c.state == tcpClose ||
			(mode&2 != 0 && c.state == tcpFinWait && c.noOutput)
	case netfilter.ProtoSCTP:
		return c.state == sctpClosed
	}
	return false
}

func (m *Model) in(p *Packet) Decision {
	switch p.Protocol {
	case netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP:
	default:
		return Decision{Verdict: VerdictAccept, Reason: "protocol not handled by IPVS"}
	}
	c := m.connInGet(p.Protocol, p.Src.Addr(), p.Src.Port(), p.Dst.Addr(), p.Dst.Port())
	var note string
	if c != nil && isNewConn(p) {
		oldCT := false
		resched := false
		var why string
		// before 5.9 the whole reuse check needs a non-zero conn_reuse_mode
		if m.sys.ExpireNodestConn && c.dest != nil && c.dest.weight == 0 && (m.kernel59() || m.sys.ConnReuseMode != 0) {
			resched = true
			oldCT = m.usesOldConntrack(c, p)
			why = "on an entry of a weight-0 real server, expire_nodest_conn=1"
		} else if m.sys.ConnReuseMode != 0 && isNewConnExpected(c, m.sys.ConnReuseMode) {
			oldCT = m.usesOldConntrack(c, p)
			if c.nControl == 0 {
				resched = true
			} else {
				// the kernel does not reschedule a controlling entry that uses
				// conntrack while it still controls connections
				resched = !oldCT
			}
			why = fmt.Sprintf("reusing the tuple of an entry in %s, conn_reuse_mode=%d", c.stateName(), m.sys.ConnReuseMode)
			if !resched {
				note = newConnName(p) + " " + why + ", with a confirmed conntrack entry while the entry still controls connections: not rescheduled"
			}
		}
		if resched {
			if !oldCT {
				c.nfct = false
			}
			if c.nControl == 0 {
				m.expireNow(c)
			}
			if oldCT {
				dec := Decision{Verdict: VerdictDrop, OldConntrack: true,
					Reason: "reused connection with conntrack, kernel expires the old entry; retransmit to reschedule (" + newConnName(p) + " " + why + ")"}
				if c.dest != nil && c.dest.svc != nil {
					dec.Service = c.dest.svc.virtualServer()
				}
				return dec
			}
			note = newConnName(p) + " " + why + ": rescheduled"
			c = nil
		}
	}
	if c != nil && c.dest != nil && !c.dest.available {
		if !m.kernel59() {
			return m.nodestBefore59(c, p)
		}
		if m.sys.ExpireNodestConn {
			oldCT := m.usesOldConntrack(c, p)
			if !oldCT {
				c.nfct = false
			}
			m.expireNow(c)
			if oldCT {
				dec := Decision{Verdict: VerdictDrop, OldConntrack: true}
				if isNewConn(p) {
					dec.Reason = "reused connection with conntrack, kernel expires the old entry; retransmit to reschedule (" +
						newConnName(p) + " on an entry of removed real server " + c.dest.addrPort().String() + ", expire_nodest_conn=1)"
				} else {
					dec.Reason = "packet with conntrack on an entry of removed real server " + c.dest.addrPort().String() +
						" (expire_nodest_conn=1), kernel expires the entry; the flow's later packets find none"
				}
				return dec
			}
			note = "real server of the old entry was removed (expire_nodest_conn): entry expired"
			c = nil
		} else {
			return Decision{Verdict: VerdictDrop, Conn: m.entry(c),
				Reason: "real server " + c.dest.addrPort().String() + " was removed; the entry lives until it times out (expire_nodest_conn=0)"}
		}
	}
	dec := Decision{}
	if c == nil {
		var ok bool
		c, dec, ok = m.tryToSchedule(p)
		if !ok {
			if note != "" {
				dec.Reason = note + "; " + dec.Reason
			}
			return dec
		}
		dec.New = true
	} else {
		dec.Via = ViaConnection
	}
	countPacket(c, p, false)
	m.setState(c, dirInput, p)
	c.inPkts++
	if c.dest != nil && c.dest.svc != nil && dec.Service == nil {
		dec.Service = c.dest.svc.virtualServer()
	}
	if c.bypass {
		dec.Verdict = VerdictBypass
		dec.Dest = netip.AddrPortFrom(c.vaddr, c.vport)
	} else {
		dec.Verdict = VerdictForward
		dec.Dest = netip.AddrPortFrom(c.daddr, c.dport)
		dec.Forward = c.fwd
	}
	if !dec.New {
		dec.Reason = "existing connection"
	}
	if note != "" {
		dec.Reason = note + "; " + dec.Reason
	}
	m.connPut(c)
	if !c.freed && !m.noEntries {
		dec.Conn = m.entry(c)
	}
	return dec
}

// usesOldConntrack is ip_vs_conn_uses_old_conntrack() since 5.9: the packet belongs to
// a confirmed netfilter conntrack entry, which cannot be redirected to another server.
// Before 5.9 it is ip_vs_conn_uses_conntrack(): the entry was made with vs/conntrack=1
// (every packet then has a conntrack entry, confirmed or not).
func (m *Model) usesOldConntrack(c *conn, p *Packet) bool {
	if !m.kernel59() {
		return c.nfct || p.ConfirmedConntrack
	}
	return p.ConfirmedConntrack
}

// kernel59 reports whether the model is Linux 5.9 or later: connection reuse with an
// unconfirmed conntrack entry and the expire_nodest_conn work item.
func (m *Model) kernel59() bool { return m.k59 }

// nodestBefore59 is what a kernel before 5.9 does with a packet on the entry of a
// removed real server: drop it, and with expire_nodest_conn expire the entry so that
// the client's retransmission is scheduled afresh.
func (m *Model) nodestBefore59(c *conn, p *Packet) Decision {
	if !m.sys.ExpireNodestConn {
		return Decision{Verdict: VerdictDrop, Conn: m.entry(c),
			Reason: "real server " + c.dest.addrPort().String() + " was removed; the entry lives until it times out (expire_nodest_conn=0)"}
	}
	m.expireNow(c)
	dec := Decision{Verdict: VerdictDrop, OldConntrack: isNewConn(p),
		Reason: "packet on an entry of removed real server " + c.dest.addrPort().String() +
			" (expire_nodest_conn=1): Linux before 5.9 drops it and expires the entry; a retransmission is scheduled afresh"}
	if c.dest.svc != nil {
		dec.Service = c.dest.svc.virtualServer()
	}
	return dec
}

// tryToSchedule is the protocol's conn_schedule() followed by ip_vs_schedule().
func (m *Model) tryToSchedule(p *Packet) (*conn, Decision, bool) {
	switch p.Protocol {
	case netfilter.ProtoTCP:
		if p.TCPFlags&netfilter.TCPRst != 0 || !(m.sys.SloppyTCP || p.TCPFlags&netfilter.TCPSyn != 0) {
			return nil, Decision{Verdict: VerdictAccept, Reason: "no connection entry and the packet is not a SYN"}, false
		}
	case netfilter.ProtoSCTP:
		if p.SCTPChunk == SCTPAbort || !(m.sys.SloppySCTP || p.SCTPChunk == SCTPInit) {
			return nil, Decision{Verdict: VerdictAccept, Reason: "no connection entry and the packet is not an INIT"}, false
		}
	}
	v6 := p.Dst.Addr().Is6()
	svc := m.findService(v6, p.Mark, p.Protocol, p.Dst.Addr(), p.Dst.Port())
	if svc == nil {
		return nil, Decision{Verdict: VerdictAccept, Reason: "no virtual service for " + p.Dst.String()}, false
	}
	c, ignored, dec := m.ipvsSchedule(svc, p)
	dec.Service = svc.virtualServer()
	if c == nil {
		switch {
		case ignored > 0:
			dec.Verdict = VerdictAccept
		case ignored == 0:
			return m.leave(svc, p, dec)
		default:
			dec.Verdict = VerdictDrop
		}
		return nil, dec, false
	}
	return c, dec, true
}

// findService is ip_vs_service_find().
func (m *Model) findService(v6 bool, mark uint32, proto uint8, vaddr netip.Addr, vport uint16) *service {
	if mark != 0 {
		if s := m.services[svcKey{fwmark: mark, v6: v6}]; s != nil {
			return s
		}
	}
	if s := m.services[svcKey{v6: v6, proto: proto, addr: vaddr, port: vport}]; s != nil {
		return s
	}
	if proto == netfilter.ProtoTCP && m.ftpSvcs > 0 && (vport == ftpDataPort || vport >= 1024) {
		if s := m.services[svcKey{v6: v6, proto: proto, addr: vaddr, port: ftpPort}]; s != nil {
			return s
		}
	}
	if m.nullSvcs > 0 {
		if s := m.services[svcKey{v6: v6, proto: proto, addr: vaddr, port: 0}]; s != nil {
			return s
		}
	}
	return nil
}

// ipvsSchedule is ip_vs_schedule(); ignored is 1 (let the packet through), 0 (no
// destination: ip_vs_leave) or -1 (drop).
func (m *Model) ipvsSchedule(svc *service, p *Packet) (*conn, int, Decision) {
	cport, vport := p.Src.Port(), p.Dst.Port()
	if cport == ftpDataPort {
		return nil, 1, Decision{Reason: "FTP data connections are not scheduled"}
	}
	if p.LocalOut {
		// a reply from a local real server of an existing connection
		if m.connInGet(p.Protocol, p.Dst.Addr(), p.Dst.Port(), p.Src.Addr(), p.Src.Port()) != nil {
			return nil, 1, Decision{Reason: "reply from a local real server of an existing connection"}
		}
	}
	// The scheduler's input is the model's scratch (it holds mu): passed to the
	// scheduler's interface method, a local would move to the heap on every packet.
	in := &m.schedIn
	*in = schedInput{saddr: p.Src.Addr(), daddr: p.Dst.Addr(), sport: cport, proto: p.Protocol}
	if svc.persistent() {
		return m.schedPersist(svc, p, in)
	}
	if svc.key.fwmark == 0 && vport != svc.key.port {
		return nil, 0, Decision{Reason: "port zero is only supported in persistent services"}
	}
	var d *dest
	if svc.sched != nil {
		d = svc.sched.schedule(m, svc, in, false)
	}
	if d == nil {
		m.stats.NoDest++
		return nil, 0, Decision{Reason: "no destination available (" + svc.schedLabel() + ")"}
	}
	m.stats.Scheduled++
	onePkt := svc.flags&ipvs.FlagOnePacket != 0 && p.Protocol == netfilter.ProtoUDP
	dport := vport
	if d.port != 0 {
		dport = d.port
	}
	c := m.connNew(p.Protocol, p.Src.Addr(), cport, p.Dst.Addr(), vport, d.addr, dport, false, onePkt, d, p.Mark)
	countConn(svc, d)
	return c, 0, Decision{Via: ViaScheduler, Reason: scheduledBy(svc.schedName)}
}

// scheduledBy is the reason of a scheduler's decision, "new connection scheduled by
// NAME", without building the text for the schedulers the model knows.
func scheduledBy(name string) string {
	switch name {
	case "rr":
		return "new connection scheduled by rr"
	case "wrr":
		return "new connection scheduled by wrr"
	case "lc":
		return "new connection scheduled by lc"
	case "wlc":
		return "new connection scheduled by wlc"
	case "sed":
		return "new connection scheduled by sed"
	case "nq":
		return "new connection scheduled by nq"
	case "sh":
		return "new connection scheduled by sh"
	case "dh":
		return "new connection scheduled by dh"
	case "mh":
		return "new connection scheduled by mh"
	}
	return "new connection scheduled by " + name
}

// templateParams is the template key of ip_vs_sched_persist().
func (m *Model) templateParams(svc *service, p *Packet) (snet, vaddr netip.Addr, vport uint16, proto uint8) {
	snet = maskAddr(p.Src.Addr(), svc)
	proto = p.Protocol
	vaddr = p.Dst.Addr()
	if p.Dst.Port() == svc.key.port {
		if svc.key.port != ftpPort {
			vport = p.Dst.Port()
		}
	} else if svc.key.fwmark != 0 {
		proto = protoIP
		vaddr = markAddr(svc.key.fwmark, svc.key.v6)
	}
	return
}

// markAddr is a fwmark as the address of a fwmark template (.ip = htonl(fwmark), the
// rest of the union zero).
func markAddr(mark uint32, v6 bool) netip.Addr {
	b := [4]byte{byte(mark >> 24), byte(mark >> 16), byte(mark >> 8), byte(mark)}
	if v6 {
		var a [16]byte
		copy(a[:], b[:])
		return netip.AddrFrom16(a)
	}
	return netip.AddrFrom4(b)
}

func maskAddr(a netip.Addr, svc *service) netip.Addr {
	if svc.key.v6 {
		pfx, err := a.Prefix(svc.bits6)
		if err != nil {
			return a
		}
		return pfx.Addr()
	}
	b := a.Unmap().As4()
	v := be32(b[:]) & svc.mask4
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// templateValid is the test of ip_vs_check_template() without its side effect.
func (m *Model) templateValid(ct *conn) bool {
	d := ct.dest
	return d != nil && d.available && !(m.sys.ExpireQuiescentTemplate && d.weight == 0)
}

// checkTemplate is ip_vs_check_template(ct, NULL): an invalid template is neutered (its
// ports rewritten so that it matches nothing) and left to its timer.
func (m *Model) checkTemplate(ct *conn) bool {
	if m.templateValid(ct) {
		return true
	}
	if ct.vport != 0xffff {
		if ct.hashed {
			m.unhash(ct)
			ct.dport = 0xffff
			ct.vport = 0xffff
			ct.cport = 0
			m.hash(ct)
		}
	}
	return false
}

// schedPersist is ip_vs_sched_persist().
func (m *Model) schedPersist(svc *service, p *Packet, in *schedInput) (*conn, int, Decision) {
	dstPort := p.Dst.Port()
	snet, vaddr, vport, proto := m.templateParams(svc, p)
	dec := Decision{}
	ct := m.ctInGet(proto, snet, vaddr, vport)
	var d *dest
	if ct == nil || !m.checkTemplate(ct) {
		if svc.sched != nil {
			d = svc.sched.schedule(m, svc, in, false)
		}
		if d == nil {
			m.stats.NoDest++
			return nil, 0, Decision{Reason: "no destination available (" + svc.schedLabel() + ")"}
		}
		m.stats.Scheduled++
		var tport uint16
		if dstPort == svc.key.port && svc.key.port != ftpPort {
			tport = d.port
		}
		ct = m.connNew(proto, snet, 0, vaddr, vport, d.addr, tport, true, false, d, p.Mark)
		ct.timeout = time.Duration(svc.timeoutSec) * time.Second
		dec.Via, dec.Reason = ViaScheduler, "new connection scheduled by "+svc.schedName+", new persistence template"
	} else {
		d = ct.dest
		dec.Via, dec.Reason = ViaTemplate, "new connection sent by its persistence template"
	}
	dport := dstPort
	if dport == svc.key.port && d.port != 0 {
		dport = d.port
	}
	onePkt := svc.flags&ipvs.FlagOnePacket != 0 && p.Protocol == netfilter.ProtoUDP
	c := m.connNew(p.Protocol, p.Src.Addr(), p.Src.Port(), p.Dst.Addr(), dstPort, d.addr, dport, false, onePkt, d, p.Mark)
	countConn(svc, d)
	c.control = ct
	ct.nControl++
	m.connPut(ct)
	return c, 0, dec
}

// leave is ip_vs_leave(): no destination for a new connection.
func (m *Model) leave(svc *service, p *Packet, dec Decision) (*conn, Decision, bool) {
	if m.sys.CacheBypass && svc.key.fwmark != 0 && !p.Dst.Addr().IsMulticast() {
		onePkt := svc.flags&ipvs.FlagOnePacket != 0 && p.Protocol == netfilter.ProtoUDP
		var zero netip.Addr
		if svc.key.v6 {
			zero = netip.IPv6Unspecified()
		} else {
			zero = netip.IPv4Unspecified()
		}
		c := m.connNew(p.Protocol, p.Src.Addr(), p.Src.Port(), p.Dst.Addr(), p.Dst.Port(), zero, 0, false, onePkt, nil, p.Mark)
		c.bypass = true
		dec.Reason += "; cache_bypass to the original destination"
		dec.Via = ViaNone
		return c, dec, true
	}
	if svc.key.fwmark == 0 && svc.key.port == ftpPort && p.Dst.Port() != ftpPort {
		dec.Verdict = VerdictAccept
		return nil, dec, false
	}
	dec.Verdict = VerdictReject
	dec.Reason += ": ICMP port unreachable"
	return nil, dec, false
}

// expireNodestConnFlush is ip_vs_expire_nodest_conn_flush(), run one jiffy after a
// destination was removed when expire_nodest_conn is set.
func (m *Model) expireNodestConnFlush() {
	for _, c := range m.allConns() {
		if c.freed {
			continue
		}
		d := c.dest
		if d == nil || d.available || c.nControl > 0 {
			continue
		}
		cc := c.control
		m.connDel(c)
		if cc != nil && cc.nControl == 0 {
			m.connDel(cc)
		}
	}
}

// allConns returns every hashed entry (connections and templates) in creation order.
func (m *Model) allConns() []*conn {
	var out []*conn
	for _, t := range []map[connKey]*conn{m.conns, m.tpls} {
		for _, head := range t {
			for c := head; c != nil; c = c.next {
				out = append(out, c)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

func (c *conn) stateName() string {
	if c.template {
		if c.assured {
			return "ASSURED"
		}
		return "NONE"
	}
	switch c.proto {
	case netfilter.ProtoTCP:
		if c.state < len(tcpStateNames) {
			return tcpStateNames[c.state]
		}
	case netfilter.ProtoUDP:
		return "UDP"
	case netfilter.ProtoSCTP:
		if c.state < len(sctpStateNames) {
			return sctpStateNames[c.state]
		}
	case protoIP:
		return "NONE"
	}
	return "ERR!"
}

func (c *conn) describe() string {
	return fmt.Sprintf("%s %s -> %s -> %s (%s)", protoName(c.proto), netip.AddrPortFrom(c.caddr, c.cport),
		netip.AddrPortFrom(c.vaddr, c.vport), netip.AddrPortFrom(c.daddr, c.dport), c.stateName())
}

// ConnEntry is a connection entry or persistence template as ipvsadm -Lnc shows it.
type ConnEntry struct {
	Protocol string         // TCP, UDP, SCTP, or IP for fwmark templates
	Client   netip.AddrPort // for templates: the client network, port 0
	Virtual  netip.AddrPort // for fwmark templates: the mark as an address, port 0
	Dest     netip.AddrPort
	State    string
	Expires  time.Duration // time left before the entry's timer fires
	Template bool
	Active   bool // counted in the destination's ActiveConn
	Forward  ipvs.ForwardMethod
	FWMark   uint32 // the packet's mark when the entry was created
	Controls int    // entries this template controls
}

func (m *Model) entry(c *conn) *ConnEntry {
	e := &ConnEntry{Protocol: protoName(c.proto), Client: netip.AddrPortFrom(c.caddr, c.cport),
		Virtual: netip.AddrPortFrom(c.vaddr, c.vport), Dest: netip.AddrPortFrom(c.daddr, c.dport),
		State: c.stateName(), Template: c.template, Active: !c.template && !c.inactive && c.dest != nil,
		Forward: c.fwd, FWMark: c.fwmark, Controls: c.nControl}
	if c.timerPending {
		e.Expires = c.expires.Sub(m.now)
	}
	return e
}

// Connections returns the connection table (entries and templates) in creation order.
func (m *Model) Connections() []ConnEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	var out []ConnEntry
	for _, c := range m.allConns() {
		out = append(out, *m.entry(c))
	}
	return out
}
