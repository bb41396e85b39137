package netsim

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/loopback"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

// lockedSource is a thread-safe math/rand (v1) Source64 over a seeded ChaCha8, as
// netstack's Options.RandSource requires.
type lockedSource struct {
	mu sync.Mutex
	r  *rand.ChaCha8
}

func (s *lockedSource) Int63() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.r.Uint64() >> 1)
}

func (s *lockedSource) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Uint64()
}

func (s *lockedSource) Seed(int64) {}

// Read implements io.Reader for Options.SecureRNG.
func (s *lockedSource) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Read(p)
}

func newLockedSource(seed [32]byte) *lockedSource {
	return &lockedSource{r: rand.NewChaCha8(seed)}
}

// seedFor derives a 32-byte seed for a named component from the cluster seed, so each
// stack's randomness depends only on the seed and its name.
func seedFor(seed uint64, name string) [32]byte {
	var out [32]byte
	h := uint64(14695981039346656037) ^ seed
	for i := 0; i < 4; i++ {
		for _, b := range []byte(name) {
			h ^= uint64(b)
			h *= 1099511628211
		}
		h ^= uint64(i) * 0x9e3779b97f4a7c15
		h *= 1099511628211
		for j := 0; j < 8; j++ {
			out[i*8+j] = byte(h >> (8 * j))
		}
	}
	return out
}

// netStack is a gVisor stack with one NIC toward the datapath (and, for pods, a
// loopback NIC).
type netStack struct {
	s    *stack.Stack
	link *stackLink
	lo   *stackLink // host stacks: the loopback NIC, wired through the datapath

	// sockets admits the programs' new sockets until the stack closes.
	sockets socketGate
}

// socketGate lets sockets be opened (an endpoint made, bound, connected or listening:
// registered with netstack) until the stack closes, and makes close wait for those
// being opened. netstack's Stack.Close aborts the endpoints registered when it starts,
// and Stack.Wait waits for those registered when it starts: an endpoint registered in
// between is never aborted, and a connection in SYN-SENT, on a clock that no longer
// moves, then holds Wait (and its dial) for ever. So close shuts the gate first: a
// socket opened before is registered by then and aborted; one opened after fails with
// net.ErrClosed.
type socketGate struct {
	mu      sync.Mutex
	closed  bool
	opening sync.WaitGroup
}

// enter admits one socket being opened (call leave when it is registered, or failed),
// or reports false once the stack is closing.
func (g *socketGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.opening.Add(1)
	return true
}

func (g *socketGate) leave() { g.opening.Done() }

// shut admits no more sockets and waits for those being opened; it reports whether it
// shut the gate (false: it was shut already).
func (g *socketGate) shut() bool {
	g.mu.Lock()
	was := g.closed
	g.closed = true
	g.mu.Unlock()
	g.opening.Wait()
	return !was
}

const (
	nicMain tcpip.NICID = 1
	nicLoop tcpip.NICID = 2
)

type stackOptions struct {
	name     string
	seed     uint64
	clock    *Clock
	mtu      uint32
	addrs    []netip.Prefix
	gateways []netip.Addr // default route next hops per family; empty: on-link
	loopback bool         // add a loopback NIC with 127.0.0.1/8 and ::1 (pods)
	out      func(frame)
	offload  bool // GSO on the main NIC, and GRO for batched deliveries (gro.go)
	trains   bool // GSO packets handed on whole, as trains (train.go); with offload only
	// noTrains, when set and true, stops trains being made (Node.noTrains).
	noTrains *atomic.Bool
	// loopOut, when set, adds a loopback NIC whose packets go to the datapath instead of
	// straight back into the stack (a node's host stack: its localhost traffic must pass
	// the OUTPUT hooks, for localhost NodePorts).
	loopOut  func(frame)
	spoofing bool // accept and send for any address
	// srcRoutes are on-link routes with a preferred source address, matched before the
	// default route (a node's host stack: pod CIDRs from the bridge address; everything
	// else from the node IP, as the kernel's routes say).
	srcRoutes []srcRoute
	// defaultSrc is the preferred source of the default route per family.
	defaultSrc []netip.Addr
}

type srcRoute struct {
	dst netip.Prefix
	src netip.Addr
}

func newNetStack(o stackOptions) (*netStack, error) {
	src := newLockedSource(seedFor(o.seed, "stack/"+o.name))
	netProtos := []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol}
	if o.loopOut != nil {
		// The host stack's lo is our link, not a netstack loopback NIC: let it take
		// 127.0.0.0/8 traffic (checksums stay real, so NATed localhost traffic can leave
		// the node).
		netProtos = []stack.NetworkProtocolFactory{
			ipv4.NewProtocolWithOptions(ipv4.Options{AllowExternalLoopbackTraffic: true}),
			ipv6.NewProtocolWithOptions(ipv6.Options{AllowExternalLoopbackTraffic: true}),
		}
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   netProtos,
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		Clock:              o.clock,
		HandleLocal:        o.loopback,
		RandSource:         src,
		SecureRNG:          src,
	})
	sack := tcpip.TCPSACKEnabled(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	link := newStackLink(o.mtu, o.out)
	link.gso, link.gro = o.offload, o.offload
	link.trains, link.noTrains = o.offload && o.trains, o.noTrains
	if err := s.CreateNIC(nicMain, link); err != nil {
		s.Close()
		return nil, fmt.Errorf("netstack %s: create NIC: %s", o.name, err)
	}
	var routes []tcpip.Route
	for _, p := range o.addrs {
		if err := addStackAddr(s, nicMain, p); err != nil {
			s.Close()
			return nil, fmt.Errorf("netstack %s: %w", o.name, err)
		}
	}
	if o.spoofing {
		s.SetSpoofing(nicMain, true)
		s.SetPromiscuousMode(nicMain, true)
	}
	var lo *stackLink
	if o.loopback || o.loopOut != nil {
		var ep stack.LinkEndpoint = loopback.New()
		if o.loopOut != nil {
			lo = newStackLink(65536, o.loopOut)
			ep = lo
		}
		if err := s.CreateNIC(nicLoop, ep); err != nil {
			s.Close()
			return nil, fmt.Errorf("netstack %s: create loopback: %s", o.name, err)
		}
		for _, p := range []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128")} {
			if err := addStackAddr(s, nicLoop, p); err != nil {
				s.Close()
				return nil, err
			}
		}
		routes = append(routes,
			tcpip.Route{Destination: mustSubnet(netip.MustParsePrefix("127.0.0.0/8")), NIC: nicLoop},
			tcpip.Route{Destination: mustSubnet(netip.MustParsePrefix("::1/128")), NIC: nicLoop})
	}
	for _, r := range o.srcRoutes {
		routes = append(routes, tcpip.Route{Destination: mustSubnet(r.dst), NIC: nicMain, SourceHint: addrOf(r.src)})
	}
	hint := func(v4 bool) tcpip.Address {
		for _, a := range o.defaultSrc {
			if a.Is4() == v4 {
				return addrOf(a)
			}
		}
		return tcpip.Address{}
	}
	v4, v6 := false, false
	for _, p := range o.addrs {
		if p.Addr().Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	for _, gw := range o.gateways {
		if gw.Is4() && v4 {
			routes = append(routes, tcpip.Route{Destination: mustSubnet(netip.MustParsePrefix("0.0.0.0/0")), Gateway: addrOf(gw), NIC: nicMain})
			v4 = false
		} else if gw.Is6() && v6 {
			routes = append(routes, tcpip.Route{Destination: mustSubnet(netip.MustParsePrefix("::/0")), Gateway: addrOf(gw), NIC: nicMain})
			v6 = false
		}
	}
	if v4 {
		routes = append(routes, tcpip.Route{Destination: mustSubnet(netip.MustParsePrefix("0.0.0.0/0")), NIC: nicMain, SourceHint: hint(true)})
	}
	if v6 {
		routes = append(routes, tcpip.Route{Destination: mustSubnet(netip.MustParsePrefix("::/0")), NIC: nicMain, SourceHint: hint(false)})
	}
	s.SetRouteTable(routes)
	return &netStack{s: s, link: link, lo: lo}, nil
}

func addStackAddr(s *stack.Stack, nic tcpip.NICID, p netip.Prefix) error {
	proto := ipv4.ProtocolNumber
	if p.Addr().Is6() {
		proto = ipv6.ProtocolNumber
	}
	pa := tcpip.ProtocolAddress{Protocol: proto, AddressWithPrefix: tcpip.AddressWithPrefix{Address: addrOf(p.Addr()), PrefixLen: p.Bits()}}
	if err := s.AddProtocolAddress(nic, pa, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("add address %s: %s", p, err)
	}
	return nil
}

// close tears the stack down: every endpoint is closed and its goroutines end, and no
// new one is opened (see socketGate). A second close does nothing.
func (n *netStack) close() {
	if !n.sockets.shut() {
		return
	}
	n.link.close()
	if n.lo != nil {
		n.lo.close()
	}
	n.s.Close()
	n.s.Wait()
}

func addrOf(a netip.Addr) tcpip.Address {
	if a.Is4() {
		return tcpip.AddrFrom4(a.As4())
	}
	return tcpip.AddrFrom16(a.As16())
}

func netipOf(a tcpip.Address) netip.Addr {
	if a.Len() == 4 {
		return netip.AddrFrom4(a.As4())
	}
	if a.Len() == 16 {
		return netip.AddrFrom16(a.As16())
	}
	return netip.Addr{}
}

func mustSubnet(p netip.Prefix) tcpip.Subnet {
	p = p.Masked()
	addr := addrOf(p.Addr())
	var mask tcpip.AddressMask
	if p.Addr().Is4() {
		m := netipMask(4, p.Bits())
		mask = tcpip.MaskFromBytes(m)
	} else {
		m := netipMask(16, p.Bits())
		mask = tcpip.MaskFromBytes(m)
	}
	sn, err := tcpip.NewSubnet(addr, mask)
	if err != nil {
		panic(err)
	}
	return sn
}

func netipMask(n, bits int) []byte {
	m := make([]byte, n)
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}
