package userspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// DefaultUDPIdleTimeout is kube-proxy's --udp-timeout default.
const DefaultUDPIdleTimeout = 250 * time.Millisecond

// DefaultDialTimeouts are the userspace proxier's endpoint dial timeouts: one dial per
// entry, each to the next endpoint, so a connection tries at most four endpoints.
var DefaultDialTimeouts = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}

// ErrProxyOnLocalhost: the listeners may not be bound to a loopback address.
var ErrProxyOnLocalhost = errors.New("cannot proxy on localhost")

// PortRange is --proxy-port-range: Size ports from Base. The zero value lets the
// network pick each listener's port (port 0).
type PortRange struct {
	Base, Size int
}

// Config configures a Proxier for one IP family.
type Config struct {
	// Family is the IP family; "" means IPv4.
	Family corev1.IPFamily
	// Node is the node the proxier runs on (its name, addresses, primary IP).
	Node proxy.NodeConfig
	// Network makes the listeners and the connections to endpoints. Required.
	Network Network
	// IPTables receives the rules; nil writes none (the listeners still work for
	// clients that connect to them directly).
	IPTables iptables.Interface
	// Conntrack, if set, clears UDP entries of service ports whose listener went away
	// (their REDIRECT would now point at a closed port).
	Conntrack proxy.Conntrack
	// Clock runs affinity and UDP timeouts and dial timeouts; default the wall clock.
	Clock Clock
	// Seed seeds the endpoint shuffles and listener ports chosen from PortRange.
	Seed uint64
	// ListenIP is --bind-address; zero means the unspecified address of the family
	// (REDIRECT rules). A loopback address is refused.
	ListenIP netip.Addr
	// HostIP is the DNAT target of the node's own traffic; default the node's primary
	// IP of the family.
	HostIP netip.Addr
	// PortRange is --proxy-port-range.
	PortRange PortRange
	// UDPIdleTimeout is --udp-timeout (default 250ms).
	UDPIdleTimeout time.Duration
	// DialTimeouts are the per-attempt endpoint dial timeouts (default
	// DefaultDialTimeouts); their number bounds the attempts per connection.
	DialTimeouts []time.Duration
	// DecisionLog is how many decisions Decisions keeps (default 4096; negative keeps
	// none).
	DecisionLog int
	// OnDecision, if set, is called with every decision, from the proxy's goroutines.
	OnDecision func(Decision)
}

// Proxier is kube-proxy's original (userspace) proxy mode for one IP family. Each Sync
// opens a listener per new service port on the node (Config.Network) and closes those
// of removed or changed ones, points the service's addresses at the listeners with
// REDIRECT/DNAT rules written through Config.IPTables, and hands the ready endpoints
// to the Balancer. Accepted TCP connections are spliced to an endpoint; UDP datagrams
// are relayed through a session per client. Each choice of endpoint is recorded as a
// Decision.
type Proxier struct {
	family   corev1.IPFamily
	tcpNet   string // "tcp4" or "tcp6"
	udpNet   string
	listenIP netip.Addr
	hostIP   netip.Addr
	network  Network
	ipt      iptables.Interface
	ct       proxy.Conntrack
	clock    Clock
	rng      *rand.Rand
	ports    PortRange
	udpIdle  time.Duration
	dials    []time.Duration
	localIPs []netip.Addr

	tracker *proxy.ChangeTracker
	lb      *Balancer
	log     *decisionLog

	mu       sync.Mutex
	services map[proxy.ServicePortName]*serviceProxy
	claims   map[claimKey]*claim
	state    *proxy.SyncState
	rules    []byte
	closed   bool

	listeners atomic.Pointer[[]Listener]
}

// serviceProxy is one service port's listener and what its rules were made from.
type serviceProxy struct {
	p     *Proxier
	name  proxy.ServicePortName
	sp    *proxy.ServicePort
	key   string
	port  uint16
	addr  netip.AddrPort
	ln    net.Listener   // TCP
	pc    net.PacketConn // UDP
	alive atomic.Bool

	mu       sync.Mutex
	sessions map[netip.AddrPort]*udpSession
}

// New returns a Proxier. Nothing is listened on or written until the first Sync.
func New(cfg Config) (*Proxier, error) {
	if cfg.Network == nil {
		return nil, errors.New("userspace proxier: nil Network")
	}
	if err := cfg.Node.Validate(); err != nil {
		return nil, fmt.Errorf("userspace proxier: %w", err)
	}
	p := &Proxier{family: cfg.Family, network: cfg.Network, ipt: cfg.IPTables, ct: cfg.Conntrack, clock: cfg.Clock,
		ports: cfg.PortRange, udpIdle: cfg.UDPIdleTimeout, dials: cfg.DialTimeouts,
		services: map[proxy.ServicePortName]*serviceProxy{}, claims: map[claimKey]*claim{}}
	switch p.family {
	case "", corev1.IPv4Protocol:
		p.family, p.tcpNet, p.udpNet = corev1.IPv4Protocol, "tcp4", "udp4"
		p.listenIP = netip.IPv4Unspecified()
	case corev1.IPv6Protocol:
		p.tcpNet, p.udpNet = "tcp6", "udp6"
		p.listenIP = netip.IPv6Unspecified()
	default:
		return nil, fmt.Errorf("userspace proxier: family %q is neither IPv4 nor IPv6", cfg.Family)
	}
	v6 := p.family == corev1.IPv6Protocol
	if cfg.ListenIP.IsValid() {
		if is6 := cfg.ListenIP.Is6() && !cfg.ListenIP.Is4In6(); is6 != v6 {
			return nil, fmt.Errorf("userspace proxier: listen IP %v is not %s", cfg.ListenIP, p.family)
		}
		if cfg.ListenIP.IsLoopback() {
			return nil, fmt.Errorf("userspace proxier: listen IP %v: %w", cfg.ListenIP, ErrProxyOnLocalhost)
		}
		p.listenIP = cfg.ListenIP.Unmap()
	}
	p.hostIP = cfg.HostIP
	if !p.hostIP.IsValid() {
		if !p.listenIP.IsUnspecified() {
			p.hostIP = p.listenIP
		} else if ip, ok := cfg.Node.PrimaryIP(p.family); ok {
			p.hostIP = ip
		} else {
			return nil, fmt.Errorf("userspace proxier: node %q has no %s address to send its own traffic to (set HostIP)", cfg.Node.Name, p.family)
		}
	}
	if p.ports.Size < 0 || p.ports.Size > 0 && (p.ports.Base < 1 || p.ports.Base+p.ports.Size-1 > 65535) {
		return nil, fmt.Errorf("userspace proxier: proxy port range %d+%d is not within 1-65535", p.ports.Base, p.ports.Size)
	}
	if p.clock == nil {
		p.clock = WallClock{}
	}
	if p.udpIdle <= 0 {
		p.udpIdle = DefaultUDPIdleTimeout
	}
	if len(p.dials) == 0 {
		p.dials = DefaultDialTimeouts
	}
	size := cfg.DecisionLog
	if size == 0 {
		size = 4096
	} else if size < 0 {
		size = 0
	}
	for _, a := range cfg.Node.LocalAddresses() {
		if a.Is6() == v6 {
			p.localIPs = append(p.localIPs, a)
		}
	}
	p.rng = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5bd1e995))
	p.lb = NewBalancer(p.clock, cfg.Seed+1)
	p.log = newDecisionLog(size, cfg.OnDecision)
	p.tracker = proxy.NewChangeTracker(p.family, cfg.Node)
	empty := []Listener{}
	p.listeners.Store(&empty)
	return p, nil
}

// Family returns the proxier's IP family.
func (p *Proxier) Family() corev1.IPFamily { return p.family }

// Balancer returns the proxier's load balancer (endpoint lists and affinity entries).
func (p *Proxier) Balancer() *Balancer { return p.lb }

// State returns the view of the last successful Sync (nil before the first).
func (p *Proxier) State() *proxy.SyncState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Rules returns the chains' restore input the last Sync wrote.
func (p *Proxier) Rules() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.rules)
}

// Decisions returns the newest decisions, oldest first.
func (p *Proxier) Decisions() []Decision { return p.log.list() }

// Listener is one proxy listener.
type Listener struct {
	Service  proxy.ServicePortName
	Protocol corev1.Protocol
	// Port is the listener's port and Addr its bound address.
	Port uint16
	Addr netip.AddrPort
	// Portals are the service addresses redirected to it (cluster IP, external IPs,
	// load-balancer IPs, with the service port) and NodePort its node port (0: none).
	Portals  []netip.AddrPort
	NodePort uint16
}

// Listeners returns the current listeners in service port order. It takes no lock
// (a snapshot made at each Sync), so datapath handlers may call it.
func (p *Proxier) Listeners() []Listener { return *p.listeners.Load() }

// ListenerAt returns the listener on a port for a protocol.
func (p *Proxier) ListenerAt(proto corev1.Protocol, port uint16) (Listener, bool) {
	for _, l := range *p.listeners.Load() {
		if l.Port == port && l.Protocol == proto {
			return l, true
		}
	}
	return Listener{}, false
}

// SyncResult reports what one Sync did.
type SyncResult struct {
	// Opened and Closed list the service ports whose listeners were opened or closed
	// (a changed service port is closed and opened again on a new port).
	Opened, Closed []proxy.ServicePortName
	// JumpData is the restore input that added missing chains and jump rules (nil if
	// none were missing); Data the chains' restore input.
	JumpData, Data []byte
	// ConntrackFilters were applied for UDP service ports whose listener went away.
	ConntrackFilters []proxy.ConntrackFilter
	// Warnings are failures the proxier only logs: a listener or node port it could not
	// open (that service port is not proxied until a later Sync succeeds), conntrack
	// deletions that failed.
	Warnings []error
}

// Sync brings listeners, rules and endpoint lists in line with the complete current
// lists of Services and EndpointSlices. Objects are treated as immutable (see
// proxy.ChangeTracker.Update).
func (p *Proxier) Sync(ctx context.Context, services []*corev1.Service, slices []*discoveryv1.EndpointSlice) (*SyncResult, error) {
	st, err := p.tracker.Update(services, slices)
	if err != nil {
		return nil, fmt.Errorf("userspace proxier: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("userspace proxier: closed")
	}
	res := &SyncResult{}
	var gone []*proxy.ServicePort
	// Removed service ports (and SCTP ones, which this mode never proxied).
	for name, s := range p.services {
		if sp, ok := st.Services[name]; ok && sp.Protocol != corev1.ProtocolSCTP {
			continue
		}
		p.stopLocked(s)
		p.lb.DeleteService(name)
		res.Closed = append(res.Closed, name)
		gone = append(gone, s.sp)
	}
	for _, name := range st.Services.SortedNames() {
		sp := st.Services[name]
		if sp.Protocol == corev1.ProtocolSCTP {
			continue
		}
		key := configKey(sp)
		if s := p.services[name]; s != nil {
			if s.key == key {
				s.sp = sp
				continue
			}
			p.stopLocked(s)
			res.Closed = append(res.Closed, name)
			gone = append(gone, s.sp)
		}
		s, err := p.startLocked(name, sp, key)
		if err != nil {
			res.Warnings = append(res.Warnings, err)
			continue
		}
		p.services[name] = s
		res.Opened = append(res.Opened, name)
		p.lb.SetService(name, sp.SessionAffinity == corev1.ServiceAffinityClientIP, sp.StickyMaxAgeSeconds)
	}
	for name := range p.services {
		var eps []string
		for _, e := range st.Endpoints[name] {
			if e.Ready {
				eps = append(eps, e.String())
			}
		}
		p.lb.SetEndpoints(name, eps)
	}
	p.lb.CleanupStaleSessions()
	p.publishLocked()

	var portals []Portal
	for _, name := range st.Services.SortedNames() {
		if s := p.services[name]; s != nil {
			portals = append(portals, Portal{Service: s.sp, ProxyPort: s.port})
		}
	}
	res.Data = RenderRules(portals, RuleOptions{ListenIP: p.listenIP, HostIP: p.hostIP})
	p.state = st
	if p.ipt != nil {
		jd, err := ensureJumps(ctx, p.ipt)
		res.JumpData = jd
		if err != nil {
			return res, fmt.Errorf("userspace proxier: %w", err)
		}
		if err := p.ipt.Restore(ctx, res.Data, iptables.RestoreOptions{NoFlush: true}); err != nil {
			return res, fmt.Errorf("userspace proxier: restore: %w", err)
		}
	}
	p.rules = res.Data
	for _, sp := range gone {
		if sp.Protocol != corev1.ProtocolUDP {
			continue
		}
		for _, ap := range portalsOf(sp) {
			res.ConntrackFilters = append(res.ConntrackFilters, proxy.ConntrackFilter{Protocol: proxy.ProtoUDP, OrigDst: ap.Addr(), OrigDstPort: ap.Port()})
		}
		if sp.NodePort != 0 {
			res.ConntrackFilters = append(res.ConntrackFilters, proxy.ConntrackFilter{Protocol: proxy.ProtoUDP, OrigDstPort: uint16(sp.NodePort)})
		}
	}
	if p.ct != nil && len(res.ConntrackFilters) > 0 {
		if _, err := proxy.CleanStaleConntrack(p.ct, res.ConntrackFilters); err != nil {
			res.Warnings = append(res.Warnings, err)
		}
	}
	return res, nil
}

// configKey is what makes a service port's listener and rules: if it changes the
// listener is replaced, as the old proxier's sameConfig decided.
func configKey(sp *proxy.ServicePort) string {
	return fmt.Sprintf("%s|%v|%d|%d|%v|%v|%s|%d", sp.Protocol, sp.ClusterIP, sp.Port, sp.NodePort, sp.ExternalIPs, sp.LoadBalancerVIPs, sp.SessionAffinity, sp.StickyMaxAgeSeconds)
}

func portalsOf(sp *proxy.ServicePort) []netip.AddrPort {
	out := []netip.AddrPort{netip.AddrPortFrom(sp.ClusterIP, uint16(sp.Port))}
	for _, ip := range sp.ExternalIPs {
		out = append(out, netip.AddrPortFrom(ip, uint16(sp.Port)))
	}
	for _, ip := range sp.LoadBalancerVIPs {
		out = append(out, netip.AddrPortFrom(ip, uint16(sp.Port)))
	}
	return out
}

func (p *Proxier) publishLocked() {
	var ls []Listener
	for _, name := range sortedNames(p.services) {
		s := p.services[name]
		ls = append(ls, Listener{Service: name, Protocol: s.sp.Protocol, Port: s.port, Addr: s.addr, Portals: portalsOf(s.sp), NodePort: uint16(s.sp.NodePort)})
	}
	if ls == nil {
		ls = []Listener{}
	}
	p.listeners.Store(&ls)
}

func sortedNames(m map[proxy.ServicePortName]*serviceProxy) []proxy.ServicePortName {
	out := make([]proxy.ServicePortName, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b proxy.ServicePortName) int {
		switch {
		case a.Less(b):
			return -1
		case b.Less(a):
			return 1
		}
		return 0
	})
	return out
}

// startLocked opens a service port's listener and claims its node port and its local
// portal addresses.
func (p *Proxier) startLocked(name proxy.ServicePortName, sp *proxy.ServicePort, key string) (*serviceProxy, error) {
	s := &serviceProxy{p: p, name: name, sp: sp, key: key, sessions: map[netip.AddrPort]*udpSession{}}
	if err := p.listenLocked(s); err != nil {
		return nil, fmt.Errorf("userspace proxier: listener for %s (%s): %w", name, sp.Protocol, err)
	}
	// Hold the node port and every service address that is a local address open, so
	// that nothing else on the node takes them (the rules send their traffic to the
	// listener before it could reach these sockets).
	var claimed []claimKey
	for _, ap := range portalsOf(sp) {
		if slices.Contains(p.localIPs, ap.Addr()) {
			k := claimKey{addr: ap, proto: sp.Protocol}
			if err := p.claimLocked(k, name); err != nil {
				p.release(claimed, name)
				s.close()
				return nil, err
			}
			claimed = append(claimed, k)
		}
	}
	if sp.NodePort != 0 {
		k := claimKey{addr: netip.AddrPortFrom(p.unspecified(), uint16(sp.NodePort)), proto: sp.Protocol}
		if err := p.claimLocked(k, name); err != nil {
			p.release(claimed, name)
			s.close()
			return nil, err
		}
	}
	s.alive.Store(true)
	if s.ln != nil {
		go s.serveTCP()
	} else {
		go s.serveUDP()
	}
	return s, nil
}

func (p *Proxier) unspecified() netip.Addr {
	if p.family == corev1.IPv6Protocol {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}

// listenLocked opens the listener: on port 0 (the network picks), or on a random free
// port of the range.
func (p *Proxier) listenLocked(s *serviceProxy) error {
	try := func(port uint16) error {
		addr := netip.AddrPortFrom(p.listenIP, port).String()
		if s.sp.Protocol == corev1.ProtocolUDP {
			pc, err := p.network.ListenPacket(p.udpNet, addr)
			if err != nil {
				return err
			}
			s.pc = pc
			s.addr = addrPortOf(pc.LocalAddr())
		} else {
			ln, err := p.network.Listen(p.tcpNet, addr)
			if err != nil {
				return err
			}
			s.ln = ln
			s.addr = addrPortOf(ln.Addr())
		}
		if !s.addr.Addr().IsValid() { // a wildcard socket may not report its address
			s.addr = netip.AddrPortFrom(p.listenIP, s.addr.Port())
		}
		s.port = s.addr.Port()
		return nil
	}
	if p.ports.Size == 0 {
		return try(0)
	}
	start := p.rng.IntN(p.ports.Size)
	var err error
	for i := 0; i < p.ports.Size; i++ {
		port := uint16(p.ports.Base + (start+i)%p.ports.Size)
		if p.portInUseLocked(port, s.sp.Protocol) {
			continue
		}
		if err = try(port); err == nil {
			return nil
		}
	}
	if err == nil {
		err = errors.New("no free port")
	}
	return fmt.Errorf("proxy port range %d+%d: %w", p.ports.Base, p.ports.Size, err)
}

func (p *Proxier) portInUseLocked(port uint16, proto corev1.Protocol) bool {
	for _, s := range p.services {
		if s.port == port && (s.sp.Protocol == corev1.ProtocolUDP) == (proto == corev1.ProtocolUDP) {
			return true
		}
	}
	return false
}

func addrPortOf(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case nil:
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// stopLocked closes a service port's listener, its UDP sessions and its claims.
// Established TCP connections are left to finish, as kube-proxy left them.
func (p *Proxier) stopLocked(s *serviceProxy) {
	delete(p.services, s.name)
	s.alive.Store(false)
	s.close()
	var keys []claimKey
	for k, c := range p.claims {
		if c.owner == s.name {
			keys = append(keys, k)
		}
	}
	p.release(keys, s.name)
}

func (s *serviceProxy) close() {
	if s.ln != nil {
		s.ln.Close()
	}
	if s.pc != nil {
		s.pc.Close()
	}
	s.mu.Lock()
	sessions := make([]*udpSession, 0, len(s.sessions))
	for _, u := range s.sessions {
		sessions = append(sessions, u)
	}
	s.mu.Unlock()
	for _, u := range sessions {
		u.end()
	}
}

// claimKey is a port held open for a service port: a node port on every address, or a
// service address that is local.
type claimKey struct {
	addr  netip.AddrPort
	proto corev1.Protocol
}

type claim struct {
	owner proxy.ServicePortName
	c     io.Closer
}

func (p *Proxier) claimLocked(k claimKey, owner proxy.ServicePortName) error {
	if c, ok := p.claims[k]; ok {
		if c.owner == owner {
			return nil
		}
		return fmt.Errorf("userspace proxier: port conflict on %v/%s: %s vs %s", k.addr, k.proto, owner, c.owner)
	}
	var closer io.Closer
	var err error
	if k.proto == corev1.ProtocolUDP {
		closer, err = p.network.ListenPacket(p.udpNet, k.addr.String())
	} else {
		closer, err = p.network.Listen(p.tcpNet, k.addr.String())
	}
	if err != nil {
		return fmt.Errorf("userspace proxier: can't open node port %v/%s for %s: %w", k.addr, k.proto, owner, err)
	}
	p.claims[k] = &claim{owner: owner, c: closer}
	return nil
}

func (p *Proxier) release(keys []claimKey, owner proxy.ServicePortName) {
	for _, k := range keys {
		if c, ok := p.claims[k]; ok && c.owner == owner {
			c.c.Close()
			delete(p.claims, k)
		}
	}
}

// Close closes every listener, UDP session and held port. Rules stay as they are.
func (p *Proxier) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	for _, s := range p.services {
		p.stopLocked(s)
	}
	for k, c := range p.claims {
		c.c.Close()
		delete(p.claims, k)
	}
	p.publishLocked()
	return nil
}

// dialCtx is a context that ends after d on the proxier's clock; done releases it and
// reports whether the time ran out.
func (p *Proxier) dialCtx(d time.Duration) (ctx context.Context, done func() (timedOut bool)) {
	ctx, cancel := context.WithCancel(context.Background())
	var expired atomic.Bool
	t := p.clock.AfterFunc(d, func() { expired.Store(true); cancel() })
	return ctx, func() bool { t.Stop(); cancel(); return expired.Load() }
}

// connect chooses endpoints for a new connection from client and dials them, each
// failed dial moving on to the next endpoint with the client's affinity reset (what
// kube-proxy's tryConnect does), recording every attempt in d.
func (s *serviceProxy) connect(network string, client netip.AddrPort, d *Decision) (net.Conn, error) {
	p := s.p
	reset := false
	for _, timeout := range p.dials {
		ch, err := p.lb.Next(s.name, client.Addr(), reset)
		if err != nil {
			d.Err = err.Error()
			return nil, err
		}
		ctx, done := p.dialCtx(timeout)
		conn, err := p.network.DialContext(ctx, network, ch.Endpoint)
		timedOut := done()
		a := Attempt{Choice: ch, Timeout: timeout}
		if err != nil {
			if timedOut {
				a.Err = fmt.Sprintf("no connection within %v", timeout)
			} else {
				a.Err = errorText(err)
			}
			d.Attempts = append(d.Attempts, a)
			reset = true
			continue
		}
		d.Attempts = append(d.Attempts, a)
		d.Endpoint = ch.Endpoint
		d.Source = addrPortOf(conn.LocalAddr())
		return conn, nil
	}
	d.Err = "failed to connect to an endpoint"
	return nil, errors.New(d.Err)
}

// errorText drops net.OpError's wrapping down to the cause ("connect: connection
// refused").
func errorText(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// serveTCP accepts connections and splices each to an endpoint. As in kube-proxy the
// endpoint is chosen and dialed on the accept loop, so one slow dial holds up the
// connections behind it.
func (s *serviceProxy) serveTCP() {
	for {
		in, err := s.ln.Accept()
		if err != nil {
			if !s.alive.Load() || !transient(err) {
				return
			}
			continue
		}
		d := Decision{Time: s.p.clock.Now(), Service: s.name, Protocol: corev1.ProtocolTCP, ProxyPort: s.port,
			Listener: addrPortOf(in.LocalAddr()), Client: addrPortOf(in.RemoteAddr())}
		out, err := s.connect(s.p.tcpNet, d.Client, &d)
		s.p.log.add(d)
		if err != nil {
			in.Close()
			continue
		}
		go splice(in, out)
	}
}

// transient reports whether a socket error leaves the socket usable: a timeout, or a
// shortage of file descriptors or a connection aborted before accept. Anything else (a
// closed socket, a network stack torn down) ends the loop reading it.
func transient(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EINTR)
}

// splice copies both ways; each direction passes its end of stream on as a half
// close, and both connections close when both directions are done (or at once on an
// error).
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			dst.Close()
			src.Close()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			if cw.CloseWrite() == nil {
				return
			}
		}
		dst.Close()
	}
	go half(b, a)
	go half(a, b)
	wg.Wait()
	a.Close()
	b.Close()
}
