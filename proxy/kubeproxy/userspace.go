package kubeproxy

// kube-proxy's userspace mode on the simulated network:
//
//	service store ──▶ netsim: Proxy.Sync ──▶ userspace.Proxier (per IP family)
//	                                           │ listeners on node.HostNet() (netstack sockets)
//	                                           │ restore text (KUBE-PORTALS-*, KUBE-NODEPORT-*)
//	                                           ▼
//	                                  emulator.Emulator attached to the node's hooks
//
// A pod's SYN to a cluster IP meets the emulator's REDIRECT in PREROUTING, is delivered
// to the node's host stack at the listener's port, and the proxier (an ordinary
// program on the node's host network) accepts it, picks an endpoint and connects to it
// from the node. A trace of the packet ends at the listener, where a small handler at
// INPUT notes which service's listener it reached and which endpoint the proxy would
// choose; the proxier's decision log (UserspaceDecisions) says what it did choose.
// The handler also copies into the trace the proxier's last decision for the same
// client and service port: each endpoint it tried, the failed dials and the retries.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/proxy/userspace"

	corev1 "k8s.io/api/core/v1"
)

func init() { Register(Userspace, newUserspaceProxy) }

// UserspaceConfig holds the userspace mode's own kube-proxy flags.
type UserspaceConfig struct {
	// UDPIdleTimeout is --udp-timeout (default 250ms), on the cluster's virtual clock.
	UDPIdleTimeout time.Duration
	// PortRange is --proxy-port-range (default: the node's host stack picks).
	PortRange userspace.PortRange
	// DialTimeouts are the endpoint dial timeouts (default 250ms, 500ms, 1s, 2s).
	DialTimeouts []time.Duration
	// DecisionLog is how many decisions each proxier keeps (default 4096).
	DecisionLog int
	// OnDecision, if set, receives every decision as it is made, with the node's name
	// (from the proxies' goroutines).
	OnDecision func(node string, d userspace.Decision)
}

// UserspaceFactory is Factory for the userspace mode with its own flags (Factory with
// Mode Userspace uses the defaults).
func UserspaceFactory(opts Options, uc UserspaceConfig) cluster.ProxyFactory {
	opts.Mode = Userspace
	return func(n *cluster.Node) (cluster.Proxy, error) {
		cfg := NodeConfigFor(n)
		if opts.Node != nil {
			opts.Node(&cfg)
		}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("kube-proxy on %s: %w", n.Name(), err)
		}
		return newUserspace(n, opts, cfg, uc)
	}
}

func newUserspaceProxy(n *cluster.Node, opts Options, cfg proxy.NodeConfig) (cluster.Proxy, error) {
	return newUserspace(n, opts, cfg, UserspaceConfig{})
}

// userspaceProxy is the userspace mode on one node: a Proxier per IP family of the
// node, each writing into an emulator attached to the node's datapath.
type userspaceProxy struct {
	n    *cluster.Node
	fams []*userspaceFamily
	hs   *healthServer
}

type userspaceFamily struct {
	family corev1.IPFamily
	emu    *emulator.Emulator
	px     *userspace.Proxier
}

// userspaceClock adapts the cluster's virtual clock to userspace.Clock.
type userspaceClock struct{ c *netsim.Clock }

func (k userspaceClock) Now() time.Time { return k.c.Now() }

func (k userspaceClock) AfterFunc(d time.Duration, f func()) userspace.Timer {
	return k.c.AfterFunc(d, f)
}

func newUserspace(n *cluster.Node, opts Options, cfg proxy.NodeConfig, uc UserspaceConfig) (*userspaceProxy, error) {
	p := &userspaceProxy{n: n}
	seed := opts.Seed
	if seed == 0 {
		seed = n.Cluster().Config().Seed
	}
	h := fnv.New64a()
	h.Write([]byte(n.Name()))
	seed ^= h.Sum64()
	seen := map[corev1.IPFamily]bool{}
	for _, ip := range n.IPs() {
		fam, efam := corev1.IPv4Protocol, emulator.IPv4
		if ip.Is6() {
			fam, efam = corev1.IPv6Protocol, emulator.IPv6
		}
		if seen[fam] {
			continue
		}
		seen[fam] = true
		emu := emulator.New(efam)
		px, err := userspace.New(userspace.Config{
			Family:         fam,
			Node:           cfg,
			Network:        n.HostNet(),
			IPTables:       emu,
			Conntrack:      Conntrack{T: n.Conntrack(), Family: fam},
			Clock:          userspaceClock{n.Cluster().Clock()},
			Seed:           seed + uint64(len(p.fams)),
			HostIP:         ip,
			PortRange:      uc.PortRange,
			UDPIdleTimeout: uc.UDPIdleTimeout,
			DialTimeouts:   uc.DialTimeouts,
			DecisionLog:    uc.DecisionLog,
			OnDecision:     userspaceOnDecision(n.Name(), uc.OnDecision),
		})
		if err != nil {
			p.close()
			return nil, fmt.Errorf("kube-proxy (userspace) on %s: %w", n.Name(), err)
		}
		emu.AttachNetsim(n.Node, "kube-proxy userspace "+string(fam))
		p.fams = append(p.fams, &userspaceFamily{family: fam, emu: emu, px: px})
	}
	n.AddHandler(netsim.HandlerSpec{Name: "kube-proxy userspace", Hook: netfilter.Input, Priority: netfilter.PrioritySecurity + 10, Handler: netsim.HandlerFunc(p.note)})
	p.hs = newHealthServer(n)
	return p, nil
}

// ServesHealthCheckNodePorts implements cluster.HealthCheckServer. (The userspace proxy
// ignores externalTrafficPolicy for its own traffic, but kube-proxy still serves the
// health check node ports in this mode.)
func (p *userspaceProxy) ServesHealthCheckNodePorts() bool { return true }

func userspaceOnDecision(node string, f func(string, userspace.Decision)) func(userspace.Decision) {
	if f == nil {
		return nil
	}
	return func(d userspace.Decision) { f(node, d) }
}

func (p *userspaceProxy) close() {
	for _, f := range p.fams {
		f.px.Close()
	}
}

// Sync implements cluster.Proxy. Listeners that could not be opened are reported as an
// error after the rest of the sync has been applied.
func (p *userspaceProxy) Sync() error {
	st := p.n.Cluster().Store()
	svcs, slices := st.ListServices(), st.ListEndpointSlices()
	var warnings []error
	var states []*proxy.SyncState
	for _, f := range p.fams {
		res, err := f.px.Sync(context.Background(), svcs, slices)
		if err != nil {
			return err
		}
		warnings = append(warnings, res.Warnings...)
		states = append(states, f.px.State())
	}
	warnings = append(warnings, p.hs.sync(healthState(states...)))
	return errors.Join(warnings...)
}

func (p *userspaceProxy) family(addr netip.Addr) *userspaceFamily {
	fam := corev1.IPv4Protocol
	if addr.Is6() {
		fam = corev1.IPv6Protocol
	}
	for _, f := range p.fams {
		if f.family == fam {
			return f
		}
	}
	return nil
}

// note adds a trace step where a packet reaches a proxy listener: which service port's
// listener, the address the client asked for, and the endpoint the proxy would choose
// for a new connection from that client now.
func (p *userspaceProxy) note(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
	if !ctx.Tracing() || pk.CtState != netfilter.CtNew || pk.Proto != netfilter.ProtoTCP && pk.Proto != netfilter.ProtoUDP {
		return netsim.VerdictContinue
	}
	f := p.family(pk.Dst)
	if f == nil {
		return netsim.VerdictContinue
	}
	proto := corev1.ProtocolTCP
	if pk.Proto == netfilter.ProtoUDP {
		proto = corev1.ProtocolUDP
	}
	l, ok := f.px.ListenerAt(proto, pk.DstPort)
	if !ok {
		return netsim.VerdictContinue
	}
	asked := ""
	if c := pk.Conn; c != nil && (c.Orig.Dst != pk.Dst || c.Orig.DstPort != pk.DstPort) {
		asked = fmt.Sprintf(" (the client asked for %v)", netip.AddrPortFrom(c.Orig.Dst, c.Orig.DstPort))
	}
	next := "no endpoints: the proxy will close the connection"
	src := pk.Src
	if pk.Conn != nil {
		src = pk.Conn.Orig.Src
	}
	if ch, err := f.px.Balancer().Peek(l.Service, src); err == nil {
		next = fmt.Sprintf("the proxy would connect to %s (%s) from this node", ch.Endpoint, ch)
	}
	ctx.Tracef("redirected to the userspace proxy listener for %s at :%d/%s%s; %s — see the proxier's decision log for what it did",
		l.Service, l.Port, userspaceProtoName(proto), asked, next)
	p.noteLastDecision(ctx, f.px, l.Service, proto, src)
	return netsim.VerdictContinue
}

// noteLastDecision adds to a trace what the proxier last did for the same client and
// service port: the traced packet itself never reaches the proxy program (a trace
// follows one packet; the proxier accepts and dials later, from its own goroutine), so
// the endpoints it tried for this client, with each failed dial and the retry after
// it, would otherwise be in its decision log only. One note per attempt, then the
// outcome.
func (p *userspaceProxy) noteLastDecision(ctx *netsim.Context, px *userspace.Proxier, svc proxy.ServicePortName, proto corev1.Protocol, client netip.Addr) {
	ds := px.Decisions()
	for i := len(ds) - 1; i >= 0; i-- {
		d := ds[i]
		if d.Service != svc || d.Protocol != proto || d.Client.Addr() != client {
			continue
		}
		ctx.Tracef("the proxier's last decision for client %v on %s (#%d): %d attempt(s), %d retry(ies)",
			client, svc, d.Seq, len(d.Attempts), d.Retries())
		for j, a := range d.Attempts {
			what := "tried"
			if j > 0 {
				what = "retried with"
			}
			res := "the dial succeeded"
			if a.Err != "" {
				res = "the dial failed: " + a.Err
			}
			ctx.Tracef("attempt %d: %s %s (%s, timeout %v); %s", j+1, what, a.Endpoint, a.Choice, a.Timeout, res)
		}
		if d.Endpoint != "" {
			ctx.Tracef("→ %s took the connection, seeing the client as %v", d.Endpoint, d.Source)
		} else {
			ctx.Tracef("→ no endpoint took the connection: %s", d.Err)
		}
		return
	}
}

func userspaceProtoName(p corev1.Protocol) string {
	if p == corev1.ProtocolUDP {
		return "udp"
	}
	return "tcp"
}

func userspaceOf(n *cluster.Node) *userspaceProxy {
	p, _ := n.Proxy().(*userspaceProxy)
	return p
}

// UserspaceProxier returns the userspace proxier of a node for a family, or nil when
// the node does not run the userspace mode (or has no address of the family).
func UserspaceProxier(n *cluster.Node, family corev1.IPFamily) *userspace.Proxier {
	p := userspaceOf(n)
	if p == nil {
		return nil
	}
	for _, f := range p.fams {
		if f.family == family {
			return f.px
		}
	}
	return nil
}

// UserspaceEmulator returns the iptables emulator holding a userspace-mode node's
// rules for a family (nil if none).
func UserspaceEmulator(n *cluster.Node, family corev1.IPFamily) *emulator.Emulator {
	p := userspaceOf(n)
	if p == nil {
		return nil
	}
	for _, f := range p.fams {
		if f.family == family {
			return f.emu
		}
	}
	return nil
}

// UserspaceDecisions returns a userspace-mode node's decisions (every family, IPv4
// first), oldest first within a family.
func UserspaceDecisions(n *cluster.Node) []userspace.Decision {
	p := userspaceOf(n)
	if p == nil {
		return nil
	}
	var out []userspace.Decision
	for _, f := range p.fams {
		out = append(out, f.px.Decisions()...)
	}
	return out
}
