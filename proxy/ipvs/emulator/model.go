package emulator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// ErrUnsupported is what the model returns for what it does not model (the sync
// daemon, persistence engines, traffic statistics); the errors of the kernel's errnos
// are package ipvs's (ErrExist, ErrNotFound, ErrInvalid, ErrRange).
var ErrUnsupported = errors.New("not supported by the userspace model") // EOPNOTSUPP

// Sysctls are the net.ipv4.vs.* settings the model honours.
type Sysctls struct {
	ConnReuseMode           int           // conn_reuse_mode (default 1; bit 2 also reuses FIN_WAIT of DR/TUN)
	ExpireNodestConn        bool          // expire_nodest_conn (default 0)
	ExpireQuiescentTemplate bool          // expire_quiescent_template (default 0)
	SloppyTCP               bool          // sloppy_tcp: any non-RST TCP packet may create a connection
	SloppySCTP              bool          // sloppy_sctp
	CacheBypass             bool          // cache_bypass: fwmark services without a destination forward to the original destination
	Conntrack               bool          // conntrack: keep netfilter conntrack for IPVS connections
	LBLCExpiration          time.Duration // lblc_expiration (default 24h)
	LBLCRExpiration         time.Duration // lblcr_expiration (default 24h)
}

// DefaultSysctls returns the kernel's defaults.
func DefaultSysctls() Sysctls {
	return Sysctls{ConnReuseMode: 1, LBLCExpiration: 24 * time.Hour, LBLCRExpiration: 24 * time.Hour}
}

// KubeProxySysctls returns what kube-proxy's IPVS mode sets on a kernel >= 5.9:
// conntrack=1, expire_nodest_conn=1, expire_quiescent_template=1, conn_reuse_mode left at 1.
func KubeProxySysctls() Sysctls {
	s := DefaultSysctls()
	s.Conntrack = true
	s.ExpireNodestConn = true
	s.ExpireQuiescentTemplate = true
	return s
}

// ApplySysctls returns base with the IPVS sysctls of settings applied (the model's view
// of what kube-proxy writes to /proc/sys/net/ipv4/vs).
func ApplySysctls(base Sysctls, settings []ipvs.SysctlSetting) Sysctls {
	for _, s := range settings {
		switch s.Name {
		case "net/ipv4/vs/conntrack":
			base.Conntrack = s.Value != 0
		case "net/ipv4/vs/conn_reuse_mode":
			base.ConnReuseMode = s.Value
		case "net/ipv4/vs/expire_nodest_conn":
			base.ExpireNodestConn = s.Value != 0
		case "net/ipv4/vs/expire_quiescent_template":
			base.ExpireQuiescentTemplate = s.Value != 0
		}
	}
	return base
}

// Config configures a Model. The zero Config is a default kernel with its own manual
// clock and seed 0.
type Config struct {
	Clock             Clock    // nil: a new ManualClock
	Seed              uint64   // the twos scheduler's random source: PCG(Seed, Seed)
	Sysctls           *Sysctls // nil: DefaultSysctls()
	LegacyActiveConns bool     // kernels before 4.8: only ESTABLISHED TCP connections are active
	MHTableIndex      int      // CONFIG_IP_VS_MH_TAB_INDEX, 8..17; 0 means 12 (4093 slots)
	SHTableBits       int      // CONFIG_IP_VS_SH_TAB_BITS, 4..20; 0 means 8 (256 buckets)
	HZ                int      // kernel HZ for the one-jiffy delay of the expire_nodest_conn work; 0 means 250
	ConnTabBits       int      // conn_tab_bits, shown as size= by ipvsadm -L; 0 means 12
	// LegacyThresholdEdit: kernels without the fix that makes an edit of a real server
	// recompute OVERLOAD from its connections and new thresholds
	// (ip_vs_dest_update_overload, "properly update the dest overload flag", tagged
	// Fixes: Linux-2.6.12-rc2 and so taken by stable releases: Debian's 6.1.0-56 has it
	// and 6.1.0-48 does not, as the VM differential shows). Without it an edit only clears OVERLOAD, when the
	// new upper threshold is 0 or higher than the old one, so a server already past a
	// new -x keeps getting connections until the next one binds to it.
	LegacyThresholdEdit bool
	// Kernel is the Linux release modelled (zero: a current one). Before 5.9 a reused
	// tuple's SYN is dropped whenever its entry uses conntrack, a packet on a deleted
	// server's entry is always dropped, and no work item flushes those entries
	// (proxy change "ipvs-conn-reuse-unconfirmed-conntrack").
	Kernel netfilter.KernelVersion
}

// Model is the userspace IPVS: virtual services, their destinations in kernel list order,
// the schedulers, and the connection table with persistence templates. It implements
// ipvs.Interface. A Model is safe for concurrent use.
type Model struct {
	mu sync.Mutex
	// noEntries: decisions leave Conn nil (InRunAt, OutRunAt: nobody reads them).
	noEntries bool
	cfg       Config
	sys       Sysctls
	clock     Clock
	now       time.Time
	pcg       *rand.PCG
	rng       *rand.Rand

	services map[svcKey]*service
	ftpSvcs  int // services on port 21 (ftpsvc_counter)
	nullSvcs int // port-zero services (nullsvc_counter)

	trash      []*dest // dest_trash, newest first
	trashGen   uint64
	trashArmed bool

	conns   map[connKey]*conn // normal connections: each key's chain (conn.next), newest first
	tpls    map[connKey]*conn // persistence templates, the same way
	connSeq uint64

	tcpTimeouts  [tcpLast + 1]time.Duration
	udpTimeout   time.Duration
	sctpTimeouts [sctpLast + 1]time.Duration

	events        eventQueue
	evSeq         uint64
	nodestGen     uint64
	nodestPending bool

	mhSize  int // MH lookup table size
	mhBits  int // IP_VS_MH_TAB_BITS
	shBits  uint
	jiffy   time.Duration
	tabBits int
	destSeq uint64
	svcSeq  uint64
	stats   Stats
	k59     bool // Linux 5.9 or later (Config.Kernel)
	picking bool // Pick is scheduling: its entry does not overload a destination
	// schedIn is the scheduler input of the packet being scheduled (under mu).
	schedIn schedInput
}

// Stats counts what the model did; useful in tests and benchmarks.
type Stats struct {
	Scheduled uint64 // scheduler decisions that returned a destination
	NoDest    uint64 // scheduler decisions that returned none
	ConnsMade uint64 // connection entries created (templates excluded)
	TplsMade  uint64 // persistence templates created
	ConnsGone uint64 // connection entries freed (templates excluded)
}

var _ ipvs.Interface = (*Model)(nil)

var mhPrimes = [...]int{251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071}

// New returns an empty model.
func New(cfg Config) (*Model, error) {
	m := &Model{cfg: cfg, services: map[svcKey]*service{}, conns: map[connKey]*conn{}, tpls: map[connKey]*conn{}}
	m.k59 = proxy.KernelHas("ipvs-conn-reuse-unconfirmed-conntrack", cfg.Kernel)
	if cfg.Clock == nil {
		m.clock = NewManualClock()
	} else {
		m.clock = cfg.Clock
	}
	if cfg.Sysctls != nil {
		m.sys = *cfg.Sysctls
	} else {
		m.sys = DefaultSysctls()
	}
	if m.sys.LBLCExpiration <= 0 {
		m.sys.LBLCExpiration = 24 * time.Hour
	}
	if m.sys.LBLCRExpiration <= 0 {
		m.sys.LBLCRExpiration = 24 * time.Hour
	}
	idx := cfg.MHTableIndex
	if idx == 0 {
		idx = 12
	}
	if idx < 8 || idx > 17 {
		return nil, fmt.Errorf("ipvs: MHTableIndex %d: want 8..17: %w", cfg.MHTableIndex, ipvs.ErrInvalid)
	}
	m.mhSize = mhPrimes[idx-8]
	m.mhBits = idx / 2
	sb := cfg.SHTableBits
	if sb == 0 {
		sb = 8
	}
	if sb < 4 || sb > 20 {
		return nil, fmt.Errorf("ipvs: SHTableBits %d: want 4..20: %w", cfg.SHTableBits, ipvs.ErrInvalid)
	}
	m.shBits = uint(sb)
	hz := cfg.HZ
	if hz == 0 {
		hz = 250
	}
	if hz < 1 {
		return nil, fmt.Errorf("ipvs: HZ %d: %w", cfg.HZ, ipvs.ErrInvalid)
	}
	m.jiffy = time.Second / time.Duration(hz)
	m.tabBits = cfg.ConnTabBits
	if m.tabBits == 0 {
		m.tabBits = 12
	}
	m.pcg = rand.NewPCG(cfg.Seed, cfg.Seed)
	m.rng = rand.New(m.pcg)
	m.tcpTimeouts = defaultTCPTimeouts
	m.udpTimeout = defaultUDPTimeout
	m.sctpTimeouts = defaultSCTPTimeouts
	m.now = m.clock.Now()
	return m, nil
}

// MustNew is New for configurations known to be valid; it panics on error.
func MustNew(cfg Config) *Model {
	m, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return m
}

// Sysctls returns the model's sysctl settings.
func (m *Model) Sysctls() Sysctls {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sys
}

// SetSysctls replaces the sysctl settings.
func (m *Model) SetSysctls(s Sysctls) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.LBLCExpiration <= 0 {
		s.LBLCExpiration = 24 * time.Hour
	}
	if s.LBLCRExpiration <= 0 {
		s.LBLCRExpiration = 24 * time.Hour
	}
	m.sys = s
}

// Reseed restarts the twos scheduler's random source as PCG(seed, seed).
func (m *Model) Reseed(seed uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pcg.Seed(seed, seed)
}

// Stats returns the model's counters.
func (m *Model) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// Now returns the model's notion of the current time (the clock's time once events due
// by then have run).
func (m *Model) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	return m.now
}

// sync runs the events that fell due since the last call. Called with mu held.
func (m *Model) sync() { m.syncAt(m.clock.Now()) }

// syncAt is sync at time now, read from the model's clock by the caller.
func (m *Model) syncAt(now time.Time) {
	if now.Before(m.now) {
		now = m.now
	}
	m.runEvents(now)
}

// svcKey identifies a virtual service: a fwmark and family, or family, protocol,
// address and port.
type svcKey struct {
	fwmark uint32
	v6     bool
	proto  uint8
	addr   netip.Addr
	port   uint16
}

func (k svcKey) String() string {
	if k.fwmark != 0 {
		if k.v6 {
			return fmt.Sprintf("FWM %d IPv6", k.fwmark)
		}
		return fmt.Sprintf("FWM %d", k.fwmark)
	}
	return protoName(k.proto) + " " + netip.AddrPortFrom(k.addr, k.port).String()
}

type service struct {
	key        svcKey
	proto      uint8 // svc->protocol (TCP for fwmark services, as ipvsadm sets it)
	schedName  string
	sched      scheduler // nil for "none"
	schedGen   uint64
	flags      ipvs.ServiceFlags // never includes FlagHashed
	timeoutSec uint32
	mask4      uint32 // IPv4 persistence mask (host order, 0xffffffff = /32)
	bits6      int    // IPv6 persistence prefix length
	dests      []*dest
	// byAddr indexes dests by address and port; posDirty says the dests' pos fields are
	// stale (they are renumbered when read: posOf), so that adding a real server at the
	// head of the list, as the kernel does, is not a pass over every other one.
	byAddr   map[netip.AddrPort]*dest
	posDirty bool
	seq      uint64
	vs       *ipvs.VirtualServer // cached virtualServer()
	traffic  TrafficStats        // ipvsadm -Ln --stats (stats.go)
}

func (s *service) persistent() bool { return s.flags&ipvs.FlagPersistent != 0 }

type dest struct {
	svc        *service
	addr       netip.Addr
	port       uint16
	weight     int
	lastWeight int
	fwd        ipvs.ForwardMethod
	tun        tunnelInfo
	uThresh    uint32
	lThresh    uint32
	active     int
	inactive   int
	persist    int
	available  bool
	overload   bool
	refs       int // references from connection entries and lblc/lblcr caches
	pos        int // index in svc.dests while linked
	seq        uint64
	traffic    TrafficStats // ipvsadm -Ln --stats (stats.go)

	// identity for trash matching (the service it was created for)
	vkey  svcKey
	vprot uint8

	inTrash   bool
	idleStart time.Time
}

type tunnelInfo struct {
	typ   uint8 // 0 ipip, 1 gue
	port  uint16
	flags uint8 // 0 nocsum, 1 csum, 2 remcsum
}

func (d *dest) addrPort() netip.AddrPort { return netip.AddrPortFrom(d.addr, d.port) }
func (d *dest) total() int               { return d.active + d.inactive }

// overhead is ip_vs_dest_conn_overhead(): activeconns*256 + inactconns.
func (d *dest) overhead() int64 { return int64(d.active)<<8 + int64(d.inactive) }

// schedulerByName returns a fresh scheduler, nil for "none".
func (m *Model) schedulerByName(name string) (scheduler, error) {
	switch name {
	case "rr":
		return &rrSched{}, nil
	case "wrr":
		return &wrrSched{}, nil
	case "lc":
		return lcSched{}, nil
	case "wlc":
		return wlcSched{}, nil
	case "sed":
		return sedSched{}, nil
	case "nq":
		return nqSched{}, nil
	case "fo":
		return foSched{}, nil
	case "ovf":
		return ovfSched{}, nil
	case "twos":
		return twosSched{}, nil
	case "dh":
		return &dhSched{}, nil
	case "sh":
		return &shSched{}, nil
	case "mh":
		return &mhSched{}, nil
	case "lblc":
		return &lblcSched{}, nil
	case "lblcr":
		return &lblcrSched{}, nil
	case "none":
		return nil, nil
	}
	return nil, fmt.Errorf("scheduler module ip_vs_%s: %w", name, ipvs.ErrNotFound)
}

// svcSpec is a service as userspace describes it (ip_vs_service_user_kern).
type svcSpec struct {
	key        svcKey
	proto      uint8
	schedName  string
	flags      ipvs.ServiceFlags
	timeoutSec uint32
	mask4      uint32
	bits6      int
}

func (m *Model) bindScheduler(s *service, sched scheduler) {
	s.sched = sched
	s.schedGen++
	if sched != nil {
		sched.init(m, s)
	}
}

func (m *Model) unbindScheduler(s *service) {
	if s.sched != nil {
		s.sched.done(m, s)
	}
	s.sched = nil
	s.schedGen++
}

func (m *Model) addService(sp svcSpec) error {
	if _, ok := m.services[sp.key]; ok {
		return fmt.Errorf("virtual service %s: %w", sp.key, ipvs.ErrExist)
	}
	sched, err := m.schedulerByName(sp.schedName)
	if err != nil {
		return err
	}
	if sp.key.v6 && (sp.bits6 < 1 || sp.bits6 > 128) {
		return fmt.Errorf("virtual service %s: IPv6 netmask /%d: %w", sp.key, sp.bits6, ipvs.ErrInvalid)
	}
	m.svcSeq++
	s := &service{key: sp.key, proto: sp.proto, schedName: sp.schedName, flags: sp.flags &^ ipvs.FlagHashed,
		timeoutSec: sp.timeoutSec, mask4: sp.mask4, bits6: sp.bits6, seq: m.svcSeq}
	m.bindScheduler(s, sched)
	if s.key.fwmark == 0 {
		if s.key.port == ftpPort {
			m.ftpSvcs++
		} else if s.key.port == 0 {
			m.nullSvcs++
		}
	}
	m.services[s.key] = s
	return nil
}

const ftpPort = 21
const ftpDataPort = 20

func (m *Model) editService(sp svcSpec) error {
	s, ok := m.services[sp.key]
	if !ok {
		return fmt.Errorf("virtual service %s: %w", sp.key, ipvs.ErrNotFound)
	}
	sched, err := m.schedulerByName(sp.schedName)
	if err != nil {
		return err
	}
	if sp.key.v6 && (sp.bits6 < 1 || sp.bits6 > 128) {
		return fmt.Errorf("virtual service %s: IPv6 netmask /%d: %w", sp.key, sp.bits6, ipvs.ErrInvalid)
	}
	s.vs = nil
	if sp.schedName != s.schedName {
		m.unbindScheduler(s)
		s.schedName = sp.schedName
		m.bindScheduler(s, sched)
	}
	s.flags = sp.flags &^ ipvs.FlagHashed
	s.timeoutSec = sp.timeoutSec
	s.mask4 = sp.mask4
	s.bits6 = sp.bits6
	return nil
}

func (m *Model) delService(key svcKey) error {
	s, ok := m.services[key]
	if !ok {
		return fmt.Errorf("virtual service %s: %w", key, ipvs.ErrNotFound)
	}
	m.unbindScheduler(s)
	for _, d := range append([]*dest(nil), s.dests...) {
		m.unlinkDest(s, d, false)
		m.trashDest(d)
	}
	if s.key.fwmark == 0 {
		if s.key.port == ftpPort {
			m.ftpSvcs--
		} else if s.key.port == 0 {
			m.nullSvcs--
		}
	}
	delete(m.services, key)
	return nil
}

// destSpec is a destination as userspace describes it (ip_vs_dest_user_kern).
type destSpec struct {
	addr    netip.Addr
	port    uint16
	weight  int
	fwd     ipvs.ForwardMethod
	tun     tunnelInfo
	uThresh uint32
	lThresh uint32
}

func (sp destSpec) check(s *service) error {
	if sp.weight < 0 {
		return fmt.Errorf("real server %s: weight %d less than zero: %w", netip.AddrPortFrom(sp.addr, sp.port), sp.weight, ipvs.ErrRange)
	}
	if sp.lThresh > sp.uThresh {
		return fmt.Errorf("real server %s: lower threshold %d is higher than upper threshold %d: %w",
			netip.AddrPortFrom(sp.addr, sp.port), sp.lThresh, sp.uThresh, ipvs.ErrRange)
	}
	if sp.fwd > ipvs.DirectRoute {
		return fmt.Errorf("real server %s: forwarding method %d: %w", netip.AddrPortFrom(sp.addr, sp.port), sp.fwd, ipvs.ErrInvalid)
	}
	if sp.addr.Is6() != s.key.v6 && sp.fwd != ipvs.Tunnel {
		return fmt.Errorf("real server %s: a different address family is allowed only for tunneling: %w",
			netip.AddrPortFrom(sp.addr, sp.port), ipvs.ErrInvalid)
	}
	return nil
}

func (s *service) lookupDest(addr netip.Addr, port uint16) *dest {
	if s.byAddr == nil {
		s.byAddr = make(map[netip.AddrPort]*dest, len(s.dests))
		for _, d := range s.dests {
			s.byAddr[netip.AddrPortFrom(d.addr, d.port)] = d
		}
	}
	return s.byAddr[netip.AddrPortFrom(addr, port)]
}

// posOf is d's index in s.dests.
func (s *service) posOf(d *dest) int {
	if s.posDirty {
		s.reindex()
		s.posDirty = false
	}
	return d.pos
}

func (m *Model) addDest(s *service, sp destSpec) error {
	if err := sp.check(s); err != nil {
		return err
	}
	if s.lookupDest(sp.addr, sp.port) != nil {
		return fmt.Errorf("real server %s in %s: %w", netip.AddrPortFrom(sp.addr, sp.port), s.key, ipvs.ErrExist)
	}
	if d := m.trashGet(s, sp.addr, sp.port); d != nil {
		m.updateDest(s, d, sp, true)
		return nil
	}
	if !unicastOK(sp.addr) {
		return fmt.Errorf("real server %s: not a unicast address: %w", sp.addr, ipvs.ErrInvalid)
	}
	m.destSeq++
	d := &dest{addr: sp.addr, port: sp.port, vkey: s.key, vprot: s.proto, seq: m.destSeq}
	m.updateDest(s, d, sp, true)
	return nil
}

// unicastOK is ip_vs_new_dest's address-type check: IPv4 RTN_UNICAST or RTN_LOCAL,
// IPv6 unicast and not link-local.
func unicastOK(a netip.Addr) bool {
	if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
		return false
	}
	if a.Is4() {
		return a != netip.AddrFrom4([4]byte{255, 255, 255, 255}) && a.As4()[0] != 0
	}
	return !a.IsLinkLocalUnicast()
}

// updateDest is __ip_vs_update_dest().
func (m *Model) updateDest(s *service, d *dest, sp destSpec, add bool) {
	if add || sp.weight != 0 {
		d.lastWeight = sp.weight
	}
	d.weight = sp.weight
	d.fwd = sp.fwd
	d.tun = sp.tun
	d.svc = s
	d.available = true
	if m.cfg.LegacyThresholdEdit {
		if sp.uThresh == 0 || sp.uThresh > d.uThresh {
			d.overload = false
		}
		d.uThresh = sp.uThresh
		d.lThresh = sp.lThresh
	} else {
		d.uThresh = sp.uThresh
		d.lThresh = sp.lThresh
		d.updateOverload()
	}
	if add {
		s.dests = append(s.dests, nil)
		copy(s.dests[1:], s.dests)
		s.dests[0] = d
		s.posDirty = true
		if s.byAddr != nil {
			s.byAddr[netip.AddrPortFrom(d.addr, d.port)] = d
		}
		if s.sched != nil {
			s.sched.addDest(m, s, d)
		}
	} else if s.sched != nil {
		s.sched.updDest(m, s, d)
	}
}

func (s *service) reindex() {
	for i, d := range s.dests {
		d.pos = i
	}
}

func (m *Model) editDest(s *service, sp destSpec) error {
	if err := sp.check(s); err != nil {
		return err
	}
	d := s.lookupDest(sp.addr, sp.port)
	if d == nil {
		return fmt.Errorf("real server %s in %s: %w", netip.AddrPortFrom(sp.addr, sp.port), s.key, ipvs.ErrNotFound)
	}
	m.updateDest(s, d, sp, false)
	return nil
}

func (m *Model) delDest(s *service, addr netip.Addr, port uint16) error {
	d := s.lookupDest(addr, port)
	if d == nil {
		return fmt.Errorf("real server %s in %s: %w", netip.AddrPortFrom(addr, port), s.key, ipvs.ErrNotFound)
	}
	m.unlinkDest(s, d, true)
	m.trashDest(d)
	return nil
}

// unlinkDest is __ip_vs_unlink_dest().
func (m *Model) unlinkDest(s *service, d *dest, svcupd bool) {
	d.available = false
	pos := s.posOf(d)
	s.dests = append(s.dests[:pos], s.dests[pos+1:]...)
	s.posDirty = true
	delete(s.byAddr, netip.AddrPortFrom(d.addr, d.port))
	if svcupd && s.sched != nil {
		s.sched.delDest(m, s, d, pos)
	}
}

// IP_VS_DEST_TRASH_PERIOD
const trashPeriod = 60 * time.Second

// SetKernel changes the Linux release the model follows (Config.Kernel; zero: a
// current kernel).
func (m *Model) SetKernel(k netfilter.KernelVersion) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cfg.Kernel = k
	m.k59 = proxy.KernelHas("ipvs-conn-reuse-unconfirmed-conntrack", k)
}

// Kernel returns the Linux release the model follows (zero: a current kernel).
func (m *Model) Kernel() netfilter.KernelVersion {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg.Kernel
}

// trashDest is __ip_vs_del_dest(): the dest moves to the trash, where it waits until no
// connection or scheduler cache refers to it.
func (m *Model) trashDest(d *dest) {
	if len(m.trash) == 0 {
		m.trashGen++
		m.schedule(event{at: m.now.Add(trashPeriod / 2), kind: evTrash, gen: m.trashGen})
	}
	m.trash = append([]*dest{d}, m.trash...)
	d.inTrash = true
	d.idleStart = time.Time{}
	if m.sys.ExpireNodestConn && !m.nodestPending && m.kernel59() {
		m.nodestPending = true
		m.nodestGen++
		m.schedule(event{at: m.now.Add(m.jiffy), kind: evNodestFlush, gen: m.nodestGen})
	}
}

// trashGet is ip_vs_trash_get_dest().
func (m *Model) trashGet(s *service, addr netip.Addr, port uint16) *dest {
	for i, d := range m.trash {
		if d.addr == addr && d.port == port && d.vkey.fwmark == s.key.fwmark && d.vprot == s.proto &&
			(s.key.fwmark != 0 || (d.vkey.addr == s.key.addr && d.vkey.port == s.key.port)) && d.vkey.v6 == s.key.v6 {
			m.trash = append(m.trash[:i], m.trash[i+1:]...)
			d.inTrash = false
			return d
		}
	}
	return nil
}

// trashExpire is ip_vs_dest_trash_expire().
func (m *Model) trashExpire() {
	kept := m.trash[:0]
	for _, d := range m.trash {
		if d.refs > 0 {
			kept = append(kept, d)
			continue
		}
		if !d.idleStart.IsZero() {
			if m.now.Before(d.idleStart.Add(trashPeriod)) {
				kept = append(kept, d)
				continue
			}
		} else {
			d.idleStart = m.now
			kept = append(kept, d)
			continue
		}
		d.inTrash = false // freed
	}
	for i := len(kept); i < len(m.trash); i++ {
		m.trash[i] = nil
	}
	m.trash = kept
	if len(m.trash) > 0 {
		m.trashGen++
		m.schedule(event{at: m.now.Add(trashPeriod / 2), kind: evTrash, gen: m.trashGen})
	}
}

// sortedServices returns the services in ipvsadm's sort order (ipvs_cmp_services).
func (m *Model) sortedServices() []*service {
	out := make([]*service, 0, len(m.services))
	for _, s := range m.services {
		out = append(out, s)
	}
	// The kernel hands ipvsadm its services in hash-table order, which depends on the
	// netns address (random per boot). Start from a true total order instead, so that the
	// result depends only on the set of services even where ipvsadm's comparator is not a
	// total order (IPv4 addresses 2^31 or more apart), then sort as ipvsadm does.
	sort.Slice(out, func(i, j int) bool { return totalLess(out[i].key, out[j].key) })
	msort(out, func(a, b *service) int { return cmpServices(a, b) })
	return out
}

func totalLess(a, b svcKey) bool {
	if a.fwmark != b.fwmark {
		return a.fwmark < b.fwmark
	}
	if a.v6 != b.v6 {
		return !a.v6
	}
	if a.proto != b.proto {
		return a.proto < b.proto
	}
	if c := a.addr.Compare(b.addr); c != 0 {
		return c < 0
	}
	return a.port < b.port
}

// cmpServices is libipvs' ipvs_cmp_services: differences of unsigned fields taken as int,
// exactly as the C code computes them (so two addresses 2^31 apart compare "wrongly", as
// in ipvsadm).
func cmpServices(a, b *service) int {
	if r := int32(a.key.fwmark - b.key.fwmark); r != 0 {
		return int(r)
	}
	if r := afNum(a.key.v6) - afNum(b.key.v6); r != 0 {
		return r
	}
	if r := int(a.proto) - int(b.proto); r != 0 {
		return r
	}
	if r := cmpAddr(a.key.addr, b.key.addr, a.key.v6); r != 0 {
		return r
	}
	return int(a.key.port) - int(b.key.port)
}

func afNum(v6 bool) int {
	if v6 {
		return 10 // AF_INET6
	}
	return 2 // AF_INET
}

func cmpAddr(a, b netip.Addr, v6 bool) int {
	if !v6 {
		if !a.IsValid() || !b.IsValid() {
			return 0
		}
		x, y := a.Unmap().As4(), b.Unmap().As4()
		return int(int32(be32(x[:]) - be32(y[:])))
	}
	x, y := a.As16(), b.As16()
	for i := 0; i < 16; i += 4 {
		if r := int32(be32(x[i:]) - be32(y[i:])); r != 0 {
			return int(r)
		}
	}
	return 0
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// cmpDests is libipvs' ipvs_cmp_dests.
func cmpDests(a, b *dest) int {
	if r := cmpAddr(a.addr, b.addr, a.addr.Is6()); r != 0 {
		return r
	}
	return int(a.port) - int(b.port)
}

// msort is glibc's merge sort (msort.c) as qsort uses it: split in halves (n1 = n/2),
// sort each, merge taking from the left while cmp(left, right) <= 0.
func msort[T any](a []T, cmp func(T, T) int) {
	if len(a) <= 1 {
		return
	}
	tmp := make([]T, len(a))
	msortRec(a, tmp, cmp)
}

func msortRec[T any](a, tmp []T, cmp func(T, T) int) {
	n := len(a)
	if n <= 1 {
		return
	}
	n1 := n / 2
	l, r := a[:n1], a[n1:]
	msortRec(l, tmp[:n1], cmp)
	msortRec(r, tmp[n1:], cmp)
	i, j, k := 0, 0, 0
	for i < len(l) && j < len(r) {
		if cmp(l[i], r[j]) <= 0 {
			tmp[k] = l[i]
			i++
		} else {
			tmp[k] = r[j]
			j++
		}
		k++
	}
	k += copy(tmp[k:], l[i:])
	copy(tmp[k:], r[j:])
	copy(a, tmp[:n])
}

// family helpers

func svcKeyFor(fwmark uint32, v6 bool, proto uint8, addr netip.Addr, port uint16) svcKey {
	if fwmark != 0 {
		return svcKey{fwmark: fwmark, v6: v6}
	}
	return svcKey{v6: addr.Is6(), proto: proto, addr: addr, port: port}
}

func parseProtocol(s string) (uint8, error) {
	switch strings.ToUpper(s) {
	case "TCP":
		return netfilter.ProtoTCP, nil
	case "UDP":
		return netfilter.ProtoUDP, nil
	case "SCTP":
		return netfilter.ProtoSCTP, nil
	}
	return 0, fmt.Errorf("protocol %q: want TCP, UDP or SCTP: %w", s, ipvs.ErrInvalid)
}
