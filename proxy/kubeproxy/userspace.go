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

func init() {
	Register(ModeInfo{
		Mode:       Userspace,
		Summary:    "kube-proxy's original mode (removed in 1.26): REDIRECT to a listener on the node, which connects to a backend itself",
		Order:      4,
		Families:   []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		ConfigType: UserspaceConfig{},
		New:        newUserspaceProxy,
		Versions:   Versions{First: "1.0", Last: "1.25", Default: "1.25", Removed: "1.26"},
		Semantics:  Semantics{AffinityExpires: true, Terminates: true},
		Differences: []Difference{
			{Name: "userspace-never-rejects", Doc: "A service port without endpoints: the iptables mode rejects new connections; " +
				"the userspace mode's listener accepts a TCP connection and closes it, and " +
				"drops a UDP datagram."},
			{Name: "userspace-backends-see-the-node", Doc: "The userspace proxy is a program on the node that accepts the client's " +
				"connection and opens its own to the endpoint, so every backend sees an address " +
				"of the node (its IP, or its bridge address toward its own pods) as the client. " +
				"The iptables mode only DNATs, and masquerades where its rules say so: a pod's " +
				"traffic to a cluster IP, or outside traffic under externalTrafficPolicy Local, " +
				"reaches the backend with the client's own address."},
			{Name: "userspace-ready-endpoints-only", Doc: "The userspace mode (removed in Kubernetes 1.26) balances over ready endpoints " +
				"only; the iptables mode falls back to serving terminating endpoints when a " +
				"service has no ready one (KEP-1669), so there the userspace mode has nowhere " +
				"to send the connection."},
			{Name: "userspace-hides-endpoint-failures", Doc: "The userspace proxy connects to the endpoint itself: an endpoint that refuses " +
				"or does not answer makes it try the next one, and when none answers it closes " +
				"the client's TCP connection (a UDP client just gets no answer). Under the " +
				"iptables mode the client meets the endpoint's RST, ICMP error or silence " +
				"itself."},
			{Name: "userspace-ignores-traffic-policies", Doc: "The userspace mode predates internalTrafficPolicy and externalTrafficPolicy: it " +
				"balances every connection over all the service's endpoints (and one the policy " +
				"keeps the iptables mode away from may not answer)."},
			{Name: "userspace-external-ips-not-from-pods", Doc: "The userspace mode redirects external-IP traffic only when it did not come " +
				"in through a bridge port (-m physdev ! --physdev-is-in) or is for a local " +
				"address: traffic from a pod on the node's bridge is routed on toward the " +
				"external IP unchanged."},
			{Name: "userspace-node-ports-on-every-address", Doc: "The userspace mode has no --nodeport-addresses: its node-port rules match " +
				"every local address (127.0.0.1 included), so a node port answers where the " +
				"iptables mode leaves it closed."},
			{Name: "userspace-udp-to-localhost-answers-from-the-wrong-address", Doc: "The userspace proxy answers a UDP client from its listener's wildcard socket, " +
				"so the kernel picks the answer's source by route: for a client on 127.0.0.1 " +
				"that is 127.0.0.1, not the node address the datagram was DNATed to, conntrack " +
				"cannot undo the DNAT, and the client drops an answer from the wrong port."},
		},
		Demo: []string{
			"the VIP is REDIRECTed to a kube-proxy listener on the client's node, which",
			"connects to backends in turn (round robin) from the node itself: the backend sees the",
			"node's address, not the client's.",
		},
		KernelNeeds: []string{"iptables"},
	})
}

// UserspaceConfig holds the userspace mode's own kube-proxy flags, as Options.ModeConfig.
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

func newUserspaceProxy(n *cluster.Node, opts Options, cfg proxy.NodeConfig) (cluster.Proxy, error) {
	uc, _ := opts.ModeConfig.(UserspaceConfig)
	return newUserspace(n, opts, cfg, uc)
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
		AttachEmulator(emu, n.Node, "kube-proxy userspace "+string(fam))
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
