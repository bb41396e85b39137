package kubeproxy

// kube-proxy's IPVS mode on the simulated network:
//
//	service store ──▶ netsim: Proxy.Sync ──▶ ipvs.Proxier (per IP family)
//	                                           │ virtual servers ──▶ ipvsemu.Model (one per node)
//	                                           │ VIPs ──▶ node interface kube-ipvs0
//	                                           │ ipsets + iptables-restore text
//	                                           ▼
//	                                  emulator.Emulator attached to the node's hooks
//
// The model sits in the node's datapath as the kernel's IPVS hooks do:
//
//	INPUT  prio 98  (NAT_SRC-2)  ip_vs_reply4:  replies of IPVS connections to this node
//	INPUT  prio 99  (NAT_SRC-1)  ip_vs_remote_request4: a connection's first packet to a
//	                              virtual service (a VIP on kube-ipvs0, a node IP for a
//	                              NodePort): the model schedules it; the handler rewrites
//	                              the destination (recorded as the conntrack entry's DNAT
//	                              binding, as ip_vs_update_conntrack does) and reroutes it
//	                              out to the real server through POSTROUTING, where
//	                              KUBE-POSTROUTING masquerades what was marked
//	FORWARD prio 99 (NAT_SRC-1)  ip_vs_reply4 and the rest of each connection: netsim's
//	                              conntrack applies the binding to later packets, so they
//	                              are forwarded, not delivered; the handler shows each of
//	                              them (in either direction) to the model, so its TCP
//	                              state machine, counters and timers move as the kernel's
//	OUTPUT prio -99 (NAT_DST+1)  ip_vs_local_request4/ip_vs_local_reply4: the same for
//	                              the node's own connections
//
// The model runs on the cluster's virtual clock with kube-proxy's sysctls
// (conntrack=1, expire_nodest_conn=1, expire_quiescent_template=1), set through the
// proxier's Sysctl writer. Traces name the virtual service, the scheduler and its
// destinations with their counters, and how the destination was found (a connection
// entry, a persistence template, the scheduler).

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

func init() {
	Register(ModeInfo{
		Mode:       IPVS,
		Summary:    "kube-proxy's IPVS mode: a kernel IPVS virtual server per service address, its scheduler picks the backend",
		Order:      2,
		Families:   []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		ConfigType: IPVSConfig{},
		New:        newIPVSProxy,
		Schedulers: ipvs.Schedulers(),
		Versions: Versions{First: "1.18", Last: "1.37", Default: "1.37",
			Deprecated: "1.35", DeprecationNote: "the IPVS mode is deprecated (KEP-5495); nftables is the suggested replacement"},
		NodeHints: true,
		Semantics: Semantics{AffinityExpires: true, NoLocalEndpoints: "cluster"},
		Differences: []Difference{
			{Name: "ipvs-rejects-other-ports-of-service-ips", Doc: "The IPVS mode binds every service IP to kube-ipvs0, so the node owns it, and " +
				"its KUBE-IPVS-FILTER chain rejects new connections to a service IP on a port no " +
				"virtual service has. The iptables mode has no rule for such a port: the packet " +
				"is routed on like any other, and lost."},
			{Name: "ipvs-no-localhost-nodeports", Doc: "Only the iptables mode serves node ports on 127.0.0.1 (route_localnet and a " +
				"nat OUTPUT rule); IPVS has virtual servers for the node's addresses only, so a " +
				"connection to 127.0.0.1:NODEPORT finds no listener."},
			{Name: "ipvs-local-policy-falls-back-to-cluster-endpoints", Doc: "Where internalTrafficPolicy or externalTrafficPolicy Local finds no endpoint " +
				"on the node, the iptables mode drops the traffic; the IPVS mode gives the " +
				"virtual server the cluster's endpoints instead (kubernetes#97081), so it is " +
				"answered from another node, refused when there are none, or, for outside " +
				"traffic sent on unmasqueraded, lost on the way back."},
			{Name: "ipvs-external-policy-applies-to-pods", Doc: "Traffic from a pod to a service's external IP: the iptables mode sends it to " +
				"the cluster's endpoints whatever the externalTrafficPolicy (its \"pod traffic " +
				"for external destinations\" rule); the IPVS mode applies the policy to it like " +
				"to outside traffic (the node's endpoints, its serving terminating ones when none is " +
				"ready, the client's address kept)."},
			{Name: "ipvs-node-ports-closed-outside-nodeport-addresses", Doc: "A node port without (local) endpoints: the iptables mode's KUBE-EXTERNAL-SERVICES " +
				"rules drop or reject it on every local address (addrtype LOCAL, whatever " +
				"--nodeport-addresses says); the IPVS mode has no virtual server on addresses " +
				"--nodeport-addresses leaves out, so there the port is simply closed."},
			{Name: "ipvs-hairpin-needs-a-local-endpoint", Doc: "A pod reaching itself through its service: the IPVS mode masquerades such " +
				"hairpin traffic through the KUBE-LOOP-BACK ipset, which lists only the node's " +
				"own endpoints; an endpoint whose EndpointSlice names another node (or none) " +
				"gets its own packets unmasqueraded, answers itself directly, and the answer " +
				"never comes back from the service address. The iptables mode masquerades every " +
				"endpoint's traffic to itself (KUBE-SEP-* -s ENDPOINT -j KUBE-MARK-MASQ)."},
			{Name: "ipvs-affinity-per-virtual-server", Doc: "ClientIP affinity: the iptables mode keeps its recent lists per service port " +
				"(one per endpoint chain, shared by the port's cluster IP, external IPs and node " +
				"ports), so a client pinned through the cluster IP stays on that endpoint through " +
				"the external IP too. The IPVS mode gives each address its own virtual server " +
				"with its own persistence, so the client is pinned separately at each and may " +
				"land on different endpoints (a pod's external-IP traffic under " +
				"externalTrafficPolicy Local, whose virtual server has only the node's " +
				"endpoints, often does)."},
		},
		Demo: []string{
			"the kernel's IPVS virtual server for the VIP picks backends with its scheduler (rr:",
			"in turn), so the counts are even; the backend sees the client's own address.",
		},
		KernelNeeds: []string{"iptables", "ipvs", "ipset", "conntrack"},
	})
}

// IPVSConfig holds the IPVS mode's own kube-proxy flags, as Options.ModeConfig (Options.Scheduler is
// --ipvs-scheduler).
type IPVSConfig struct {
	// ExcludeCIDRs is --ipvs-exclude-cidrs.
	ExcludeCIDRs []netip.Prefix
	// StrictARP is --ipvs-strict-arp.
	StrictARP bool
	// TCPTimeout, TCPFinTimeout and UDPTimeout are --ipvs-tcp-timeout,
	// --ipvs-tcpfin-timeout and --ipvs-udp-timeout.
	TCPTimeout, TCPFinTimeout, UDPTimeout time.Duration
	// KernelVersion is the node's kernel ("" the node's netsim.NodeSettings.Kernel,
	// a current one by default): it decides conn_reuse_mode and the IPVS model's kernel
	// behaviour.
	KernelVersion string
	// Model adjusts each node's IPVS model configuration (kernel build options, legacy
	// active-connection counting) before the model is made.
	Model func(*ipvsemu.Config)
}

func newIPVSProxy(n *cluster.Node, opts Options, cfg proxy.NodeConfig) (cluster.Proxy, error) {
	ic, _ := opts.ModeConfig.(IPVSConfig)
	return newIPVS(n, opts, cfg, ic)
}

// ipvsProxy is the IPVS mode on one node: one model, a proxier and an emulator per IP
// family of the node.
type ipvsProxy struct {
	n     *cluster.Node
	model *ipvsemu.Model
	fams  []*ipvsFamily

	mu      sync.Mutex // serialises syncs and the graceful-termination check
	hs      *healthServer
	ticking bool
	// sysMu guards lastIPVS, the node's IPVS sysctl overrides last applied to the
	// model, and baseSys, the model's sysctls once kube-proxy wrote its own.
	sysMu    sync.Mutex
	lastIPVS netsim.IPVSSysctls
	baseSys  ipvsemu.Sysctls
	stats    ipvsHandlerStats
}

type ipvsFamily struct {
	family corev1.IPFamily
	emu    *emulator.Emulator
	px     *ipvs.Proxier
}

// ipvsHandlerStats counts what the handlers did (for tests and benchmarks).
type ipvsHandlerStats struct {
	mu                           sync.Mutex
	scheduled, rejected, dropped uint64
}

func newIPVS(n *cluster.Node, opts Options, cfg proxy.NodeConfig, ic IPVSConfig) (*ipvsProxy, error) {
	seed := opts.Seed
	if seed == 0 {
		seed = n.Cluster().Config().Seed
	}
	h := fnv.New64a()
	h.Write([]byte("ipvs/" + n.Name()))
	kernel := n.Settings().Kernel
	if ic.KernelVersion != "" {
		k, err := netfilter.ParseKernelVersion(ic.KernelVersion)
		if err != nil {
			return nil, fmt.Errorf("kube-proxy (ipvs) on %s: %w", n.Name(), err)
		}
		kernel = k
	}
	mc := ipvsemu.Config{Clock: n.Cluster().Clock(), Seed: seed ^ h.Sum64(), Kernel: kernel}
	if ic.Model != nil {
		ic.Model(&mc)
	}
	model, err := ipvsemu.New(mc)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy (ipvs) on %s: %w", n.Name(), err)
	}
	p := &ipvsProxy{n: n, model: model}
	nl := ipvsNetlink{n}
	sys := &ipvsSysctl{n: n, model: model}
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
		px, err := ipvs.NewProxier(ipvs.Writers{IPVS: model, IPSets: emu, IPTables: emu, Netlink: nl,
			Conntrack: Conntrack{T: n.Conntrack(), Family: fam}, Sysctl: sys},
			ipvs.ProxierConfig{Family: fam, Node: cfg, Scheduler: opts.Scheduler, ExcludeCIDRs: ic.ExcludeCIDRs,
				StrictARP: ic.StrictARP, TCPTimeout: ic.TCPTimeout, TCPFinTimeout: ic.TCPFinTimeout, UDPTimeout: ic.UDPTimeout,
				KernelVersion: kernelString(kernel)})
		if err != nil {
			return nil, fmt.Errorf("kube-proxy (ipvs) on %s: %w", n.Name(), err)
		}
		emu.SetIPVSLookup(p.ipvsLookup)
		AttachEmulator(emu, n.Node, "kube-proxy ipvs "+string(fam))
		p.fams = append(p.fams, &ipvsFamily{family: fam, emu: emu, px: px})
	}
	for _, s := range []netsim.HandlerSpec{
		{Name: "ipvs reply", Hook: netfilter.Input, Priority: netfilter.PriorityNATSrc - 2, Handler: netsim.HandlerFunc(p.inputReply)},
		{Name: "ipvs", Hook: netfilter.Input, Priority: netfilter.PriorityNATSrc - 1, Handler: netsim.HandlerFunc(p.inputRequest)},
		{Name: "ipvs", Hook: netfilter.Forward, Priority: netfilter.PriorityNATSrc - 1, Handler: &ipvsForward{p: p}},
		{Name: "ipvs", Hook: netfilter.Output, Priority: netfilter.PriorityNATDst + 1, Handler: netsim.HandlerFunc(p.output)},
	} {
		n.AddHandler(s)
	}
	p.hs = newHealthServer(n)
	p.baseSys = model.Sysctls()
	p.applyNodeSysctls()
	return p, nil
}

func kernelString(k netfilter.KernelVersion) string {
	if k.IsZero() {
		return ""
	}
	return k.String()
}

// applyNodeSysctls sets the net.ipv4.vs sysctls the node's settings hold
// (netsim.NodeSettings.IPVS) over what kube-proxy wrote, as an administrator's sysctl
// after kube-proxy started would; the handlers call it so that a node_settings change
// at run time takes effect at the next packet (an override taken away gives back
// kube-proxy's value).
func (p *ipvsProxy) applyNodeSysctls() {
	ov := p.n.IPVSSettings()
	p.sysMu.Lock()
	defer p.sysMu.Unlock()
	if ov == p.lastIPVS {
		return
	}
	p.lastIPVS = ov
	var set []ipvs.SysctlSetting
	for _, x := range []struct {
		name string
		v    netsim.Sysctl
	}{
		{"net/ipv4/vs/conn_reuse_mode", ov.ConnReuseMode},
		{"net/ipv4/vs/expire_nodest_conn", ov.ExpireNodestConn},
		{"net/ipv4/vs/expire_quiescent_template", ov.ExpireQuiescentTemplate},
		{"net/ipv4/vs/conntrack", ov.Conntrack},
	} {
		if x.v.Set {
			set = append(set, ipvs.SysctlSetting{Name: x.name, Value: x.v.Value})
		}
	}
	p.model.SetSysctls(ipvsemu.ApplySysctls(p.baseSys, set))
}

// ServesHealthCheckNodePorts implements cluster.HealthCheckServer.
func (p *ipvsProxy) ServesHealthCheckNodePorts() bool { return true }

// Sync implements cluster.Proxy.
func (p *ipvsProxy) Sync() error {
	st := p.n.Cluster().Store()
	svcs, slices := st.ListServices(), st.ListEndpointSlices()
	p.mu.Lock()
	defer p.mu.Unlock()
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
	p.armGracefulCheck()
	warnings = append(warnings, p.hs.sync(healthState(states...)))
	return errors.Join(warnings...)
}

// armGracefulCheck starts kube-proxy's one-minute graceful-termination check on the
// virtual clock while real servers are being terminated. Called with mu held.
func (p *ipvsProxy) armGracefulCheck() {
	if p.ticking {
		return
	}
	pending := false
	for _, f := range p.fams {
		pending = pending || len(f.px.Terminating()) > 0
	}
	if !pending {
		return
	}
	p.ticking = true
	p.n.Cluster().Clock().AfterFunc(ipvs.GracefulCheckInterval, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.ticking = false
		for _, f := range p.fams {
			// Errors are kube-proxy log lines (a real server already gone): the
			// check goes on.
			_, _ = f.px.GracefulCheck()
		}
		p.armGracefulCheck()
	})
}

// ---- the node as the proxier's Netlink and Sysctl ----

// ipvsNetlink is a netsim node as ipvs.Netlink.
type ipvsNetlink struct{ n *cluster.Node }

func (l ipvsNetlink) EnsureDummyDevice(name string) (bool, error) {
	for _, i := range l.n.Interfaces() {
		if i.Name == name {
			return true, nil
		}
	}
	l.n.AddInterface(name)
	return false, nil
}

func (l ipvsNetlink) LocalAddresses(dev string) ([]netip.Addr, error) {
	var out []netip.Addr
	found := dev == ""
	for _, i := range l.n.Interfaces() {
		if dev != "" && i.Name != dev {
			continue
		}
		found = true
		for _, a := range i.Addrs {
			out = append(out, a.Addr())
		}
	}
	if !found {
		return nil, fmt.Errorf("node %s: no interface %q", l.n.Name(), dev)
	}
	return out, nil
}

func (l ipvsNetlink) BindAddress(dev string, addr netip.Addr) error {
	return l.n.AddAddress(dev, netip.PrefixFrom(addr, addr.BitLen()))
}

func (l ipvsNetlink) UnbindAddress(dev string, addr netip.Addr) error {
	return l.n.RemoveAddress(dev, addr)
}

// ipvsSysctl applies kube-proxy's sysctl writes to the node: net/ipv4/vs/* to the IPVS
// model, ip_forward to the node's settings; the ARP ones have no effect in netsim (it
// has no ARP) and are only recorded.
type ipvsSysctl struct {
	n      *cluster.Node
	model  *ipvsemu.Model
	mu     sync.Mutex
	writes []ipvs.SysctlSetting
}

func (s *ipvsSysctl) SetSysctl(name string, value int) error {
	s.mu.Lock()
	s.writes = append(s.writes, ipvs.SysctlSetting{Name: name, Value: value})
	s.mu.Unlock()
	switch {
	case strings.HasPrefix(name, "net/ipv4/vs/"):
		s.model.SetSysctls(ipvsemu.ApplySysctls(s.model.Sysctls(), []ipvs.SysctlSetting{{Name: name, Value: value}}))
	case name == "net/ipv4/ip_forward":
		s.n.UpdateSettings(func(ns *netsim.NodeSettings) { ns.IPForward = value != 0 })
	}
	return nil
}

// ---- the datapath handlers ----

// ipvsPacket is the model's view of a netsim packet with the given addresses.
func ipvsPacket(pk *netsim.Packet, src, dst netip.AddrPort, localOut bool) ipvsemu.Packet {
	q := ipvsemu.Packet{Protocol: pk.Proto, Src: src, Dst: dst, Mark: pk.Mark, TCPFlags: pk.TCPFlags, LocalOut: localOut,
		ConfirmedConntrack: pk.Conn != nil && pk.Conn.Has(netfilter.StatusConfirmed), Len: len(pk.Data)}
	if pk.Proto == netfilter.ProtoSCTP {
		// netsim does not parse SCTP chunks: a connection's first packet stands for INIT.
		q.SCTPChunk = ipvsemu.SCTPData
		if pk.CtState == netfilter.CtNew {
			q.SCTPChunk = ipvsemu.SCTPInit
		}
	}
	return q
}

func handled(proto uint8) bool {
	return proto == netfilter.ProtoTCP || proto == netfilter.ProtoUDP || proto == netfilter.ProtoSCTP
}

// bound reports whether the packet's connection has a DNAT binding (IPVS's, in this
// mode, which writes no DNAT rules).
func bound(pk *netsim.Packet) bool {
	return pk.Conn != nil && pk.Conn.Has(netfilter.StatusDstNAT)
}

// inputRequest is ip_vs_remote_request4: the first packet of a connection to a local
// address, which may be a virtual service.
func (p *ipvsProxy) inputRequest(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
	if !handled(pk.Proto) || pk.CtReply || pk.IsICMPError() {
		return netsim.VerdictContinue
	}
	p.applyNodeSysctls()
	if bound(pk) {
		// A later packet of a connection whose real server is this node itself.
		return p.established(ctx, pk, false)
	}
	return p.request(ctx, pk, false)
}

// output is ip_vs_local_request4 and ip_vs_local_reply4: the node's own packets.
func (p *ipvsProxy) output(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
	if !handled(pk.Proto) || pk.IsICMPError() {
		return netsim.VerdictContinue
	}
	p.applyNodeSysctls()
	switch {
	case pk.CtReply:
		return p.reply(ctx, pk)
	case bound(pk):
		return p.established(ctx, pk, true)
	}
	return p.request(ctx, pk, true)
}

// inputReply is ip_vs_reply4 at LOCAL_IN: replies to the node's own connections.
func (p *ipvsProxy) inputReply(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
	if !handled(pk.Proto) || !pk.CtReply || pk.IsICMPError() {
		return netsim.VerdictContinue
	}
	return p.reply(ctx, pk)
}

// forward sees every forwarded packet of an IPVS connection after its first: replies
// (ip_vs_reply4) and the client's later packets, which netsim's conntrack has already
// sent on to the real server.
func (p *ipvsProxy) forward(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
	if !handled(pk.Proto) || !bound(pk) || pk.IsICMPError() {
		return netsim.VerdictContinue
	}
	if pk.CtReply {
		return p.reply(ctx, pk)
	}
	return p.established(ctx, pk, false)
}

// ipvsForward is the FORWARD hook's handler (forward), which answers for trains too: a
// train of a connection IPVS forwards goes on whole, and the model sees each of its
// segments when the train commits.
type ipvsForward struct {
	p *ipvsProxy
	// The train PeekTrain answered for, until CommitTrain (under the node's lock).
	pending   bool
	mid, last ipvsemu.Packet
	n         int
	reply     bool
	now       time.Time
}

var _ netsim.TrainHandler = (*ipvsForward)(nil)

// Handle implements netsim.Handler.
func (h *ipvsForward) Handle(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
	return h.p.forward(ctx, pk)
}

// PeekTrain implements netsim.TrainHandler. Forward lets a train of a connection's
// later packets go on whole when every segment's pass would be a Continue: replies
// (reply: the model moves the entry's state, the packet goes on), and the client's
// packets when the entry sends them to the real server the connection is bound to
// (PeekInAt: a decision that holds for every segment). CommitTrain then shows the model
// each segment, with its flags and length, as forward would have one by one, so the
// entry's state, timeout and the byte and packet statistics are those the segments give.
func (h *ipvsForward) PeekTrain(ctx *netsim.Context, pk *netsim.Packet, t netsim.Train) (netsim.Verdict, bool) {
	h.pending = false
	if !handled(pk.Proto) || !bound(pk) || pk.IsICMPError() {
		return netsim.VerdictContinue, true
	}
	if ctx.DryRun() || ctx.Tracing() {
		return netsim.Verdict{}, false
	}
	c := pk.Conn
	if pk.CtReply {
		h.mid = ipvsPacket(pk, netip.AddrPortFrom(c.Reply.Src, c.Reply.SrcPort), netip.AddrPortFrom(c.Orig.Src, c.Orig.SrcPort), false)
	} else {
		h.mid = ipvsPacket(pk, netip.AddrPortFrom(c.Orig.Src, c.Orig.SrcPort), netip.AddrPortFrom(c.Orig.Dst, c.Orig.DstPort), false)
		d, ok := h.p.model.PeekInAt(h.mid, ctx.Now())
		if !ok || d.Verdict == ipvsemu.VerdictForward && d.Dest != netip.AddrPortFrom(c.Reply.Src, c.Reply.SrcPort) {
			return netsim.Verdict{}, false
		}
	}
	h.last = h.mid
	h.mid.TCPFlags, h.mid.Len = t.Flags, t.Len
	h.last.Len = t.LastLen
	h.n, h.reply, h.now, h.pending = t.Segments-1, pk.CtReply, ctx.Now(), true
	return netsim.VerdictContinue, true
}

// CommitTrain implements netsim.TrainHandler.
func (h *ipvsForward) CommitTrain() {
	if !h.pending {
		return
	}
	h.pending = false
	if h.reply {
		h.p.model.OutRunAt(h.mid, h.n, h.last, h.now)
	} else {
		h.p.model.InRunAt(h.mid, h.n, h.last, h.now)
	}
}

// request handles a connection's first packet.
func (p *ipvsProxy) request(ctx *netsim.Context, pk *netsim.Packet, localOut bool) netsim.Verdict {
	q := ipvsPacket(pk, netip.AddrPortFrom(pk.Src, pk.SrcPort), netip.AddrPortFrom(pk.Dst, pk.DstPort), localOut)
	var before string
	if ctx.Tracing() {
		before = p.destinations(q)
	}
	var d ipvsemu.Decision
	if ctx.DryRun() {
		d = p.model.Schedule(q)
	} else {
		d = p.model.In(q)
	}
	if d.Service == nil && d.Verdict == ipvsemu.VerdictAccept {
		return netsim.VerdictContinue // not a virtual service
	}
	if ctx.Tracing() {
		p.trace(ctx, q, d, before)
	}
	return p.act(ctx, pk, d, localOut)
}

// act turns a decision on a first packet into a verdict.
func (p *ipvsProxy) act(ctx *netsim.Context, pk *netsim.Packet, d ipvsemu.Decision, localOut bool) netsim.Verdict {
	var reason string
	if d.Verdict != ipvsemu.VerdictForward || ctx.Tracing() {
		// A forwarded packet's reason shows only in a trace: the datapath reads a
		// Continue's or Reroute's reason nowhere else.
		reason = "IPVS " + serviceLabel(d.Service) + ": " + d.Reason
	}
	switch d.Verdict {
	case ipvsemu.VerdictForward:
		if !ctx.DryRun() {
			p.count(func(s *ipvsHandlerStats) { s.scheduled++ })
		}
		if d.Forward != ipvs.Masquerade && reason != "" {
			// kube-proxy programs masquerading real servers only; a hand-made
			// direct-routing or tunnel server is forwarded as if masquerading.
			reason += " (forwarding method treated as masquerade)"
		}
		ctx.RewriteDst(pk, d.Dest)
		if localOut || ctx.IsLocalAddr(d.Dest.Addr()) {
			// After OUTPUT the datapath routes the rewritten packet itself; a real
			// server on this node takes it up the local stack (IPVS's LOCALNODE).
			return netsim.Verdict{Kind: netsim.Continue, Reason: reason}
		}
		return netsim.Verdict{Kind: netsim.Reroute, Reason: reason}
	case ipvsemu.VerdictReject:
		if !ctx.DryRun() {
			p.count(func(s *ipvsHandlerStats) { s.rejected++ })
		}
		return netsim.RejectVerdict(netfilter.RejectPortUnreachable, reason)
	case ipvsemu.VerdictDrop:
		if !ctx.DryRun() {
			p.count(func(s *ipvsHandlerStats) { s.dropped++ })
		}
		return netsim.Verdict{Kind: netsim.Drop, Reason: reason}
	case ipvsemu.VerdictBypass:
		return netsim.Verdict{Kind: netsim.Continue, Reason: reason + " (cache bypass: to the original destination)"}
	}
	return netsim.Verdict{Kind: netsim.Continue, Reason: reason}
}

// established shows a later packet of a connection to the model (with the addresses it
// had before the binding rewrote it) and drops it when IPVS would.
func (p *ipvsProxy) established(ctx *netsim.Context, pk *netsim.Packet, localOut bool) netsim.Verdict {
	c := pk.Conn
	if ctx.DryRun() {
		return netsim.VerdictContinue
	}
	q := ipvsPacket(pk, netip.AddrPortFrom(c.Orig.Src, c.Orig.SrcPort), netip.AddrPortFrom(c.Orig.Dst, c.Orig.DstPort), localOut)
	d := p.model.InAt(q, ctx.Now()) // the packet's time: the model need not read the clock again
	switch d.Verdict {
	case ipvsemu.VerdictForward:
		if d.Dest == netip.AddrPortFrom(c.Reply.Src, c.Reply.SrcPort) {
			return netsim.VerdictContinue
		}
		if ctx.Tracing() {
			p.trace(ctx, q, d, "")
		}
		return netsim.Verdict{Kind: netsim.Drop, Reason: fmt.Sprintf("IPVS %s: %s, to %s, but the connection is bound to %s", serviceLabel(d.Service), d.Reason, d.Dest, netip.AddrPortFrom(c.Reply.Src, c.Reply.SrcPort))}
	case ipvsemu.VerdictAccept:
		if pk.Proto == netfilter.ProtoTCP && pk.TCPFlags&netfilter.TCPRst == 0 && d.Service == nil && strings.HasPrefix(d.Reason, "no connection entry") && p.isVirtual(q) {
			// The IPVS entry expired (its TCP timeout is far shorter than
			// conntrack's): the kernel passes the packet to the local stack, where
			// nothing listens on the VIP, and the client gets a reset.
			return netsim.RejectVerdict(netfilter.RejectTCPReset, "IPVS: no connection entry for "+q.String()+" any more (it expired): the node's own stack resets the connection")
		}
		return netsim.VerdictContinue
	case ipvsemu.VerdictDrop:
		p.count(func(s *ipvsHandlerStats) { s.dropped++ })
		return netsim.Verdict{Kind: netsim.Drop, Reason: "IPVS " + serviceLabel(d.Service) + ": " + d.Reason}
	case ipvsemu.VerdictReject:
		p.count(func(s *ipvsHandlerStats) { s.rejected++ })
		return netsim.RejectVerdict(netfilter.RejectPortUnreachable, "IPVS "+serviceLabel(d.Service)+": "+d.Reason)
	}
	return netsim.VerdictContinue
}

// reply shows a reply to the model (ip_vs_out), before conntrack rewrites its source
// back to the virtual address.
func (p *ipvsProxy) reply(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
	c := pk.Conn
	if c == nil || !c.Has(netfilter.StatusDstNAT) || ctx.DryRun() {
		return netsim.VerdictContinue
	}
	q := ipvsPacket(pk, netip.AddrPortFrom(c.Reply.Src, c.Reply.SrcPort), netip.AddrPortFrom(c.Orig.Src, c.Orig.SrcPort), false)
	d := p.model.OutAt(q, ctx.Now())
	if ctx.Tracing() && d.Verdict == ipvsemu.VerdictForward && d.Conn != nil {
		ctx.Trace(netsim.TraceStep{Kind: netsim.StepNote, Detail: fmt.Sprintf("IPVS reply of %s: connection %s -> %s -> %s now %s",
			serviceLabel(d.Service), d.Conn.Client, d.Conn.Virtual, d.Conn.Dest, d.Conn.State)})
	}
	return netsim.VerdictContinue
}

func (p *ipvsProxy) isVirtual(q ipvsemu.Packet) bool {
	vs, err := p.model.GetVirtualServer(&ipvs.VirtualServer{Address: q.Dst.Addr(), Port: q.Dst.Port(), Protocol: protoUpper(q.Protocol)})
	return err == nil && vs != nil
}

// ipvsLookup tells the emulator's -m ipvs rules (KUBE-IPVS-OUT-FILTER) which packets
// IPVS has handled (skb->ipvs_property): after the IPVS hooks have run — at OUTPUT from
// the filter table on (IPVS's LOCAL_OUT hook runs at NF_IP_PRI_NAT_DST+2), and at
// POSTROUTING — a packet in its connection's original direction whose destination IPVS
// rewrote from a virtual service of this node. Its entry's virtual address and port are
// the connection's original destination; kube-proxy's real servers are masqueraded.
func (p *ipvsProxy) ipvsLookup(q *emulator.Packet, hook netfilter.Hook, table string) *emulator.IPVSConn {
	switch {
	case hook == netfilter.Output && (table == emulator.TableFilter || table == emulator.TableSecurity):
	case hook == netfilter.Postrouting:
	default:
		return nil
	}
	o := q.CT.Orig
	if q.CT.Reply || !o.Dst.IsValid() || (q.Dst == o.Dst && q.DstPort == o.DstPort) {
		return nil
	}
	if !handled(q.Proto) || !p.isVirtual(ipvsemu.Packet{Protocol: q.Proto, Dst: netip.AddrPortFrom(o.Dst, o.DstPort)}) {
		return nil
	}
	return &emulator.IPVSConn{VAddr: o.Dst, VPort: o.DstPort, Method: emulator.IPVSMasq}
}

func (p *ipvsProxy) count(f func(*ipvsHandlerStats)) {
	p.stats.mu.Lock()
	f(&p.stats)
	p.stats.mu.Unlock()
}

func protoUpper(p uint8) string {
	switch p {
	case netfilter.ProtoUDP:
		return "UDP"
	case netfilter.ProtoSCTP:
		return "SCTP"
	}
	return "TCP"
}

func serviceLabel(vs *ipvs.VirtualServer) string {
	if vs == nil {
		return "(no virtual service)"
	}
	if vs.FWMark != 0 {
		return fmt.Sprintf("FWM %d", vs.FWMark)
	}
	s := vs.Protocol + " " + netip.AddrPortFrom(vs.Address, vs.Port).String() + " " + vs.Scheduler
	if vs.Flags&ipvs.FlagPersistent != 0 {
		s += fmt.Sprintf(" persistent %d", vs.Timeout)
	}
	return s
}

// schedulerWhy says in a line how each scheduler picks.
var schedulerWhy = map[string]string{
	"rr":    "round robin: the next destination after the last one chosen, in list order (weight 0 skipped)",
	"wrr":   "weighted round robin: passes over the list taking each destination whose weight is at least the current weight",
	"lc":    "least connections: the lowest active*256+inactive, first in list order on a tie",
	"wlc":   "weighted least connections: the lowest (active*256+inactive)/weight",
	"sed":   "shortest expected delay: the lowest (active+1)/weight",
	"nq":    "never queue: the first idle destination, else shortest expected delay",
	"dh":    "destination hashing: a 256-bucket table indexed by a hash of the destination address",
	"sh":    "source hashing: a 256-bucket table indexed by a hash of the client address",
	"mh":    "Maglev hashing of the client address (and port with mh-port) into a 4093-slot table",
	"lblc":  "locality-based least connections: the destination cached for the address, else wlc",
	"lblcr": "locality-based least connections with replication",
	"fo":    "weighted fail-over: the highest weight",
	"ovf":   "overflow: the highest weight while its active connections stay below its weight",
	"twos":  "power of two random choices by weight, the less loaded of the two",
}

// destinations describes the service's destinations before a decision (for traces).
func (p *ipvsProxy) destinations(q ipvsemu.Packet) string {
	vs := &ipvs.VirtualServer{Address: q.Dst.Addr(), Port: q.Dst.Port(), Protocol: protoUpper(q.Protocol)}
	rss, err := p.model.GetRealServers(vs)
	if err != nil {
		return ""
	}
	if len(rss) == 0 {
		return "no destinations"
	}
	parts := make([]string, 0, len(rss))
	for _, rs := range rss {
		s := fmt.Sprintf("%s weight %d active %d inactive %d", netip.AddrPortFrom(rs.Address, rs.Port), rs.Weight, rs.ActiveConn, rs.InactiveConn)
		if rs.PersistConn > 0 {
			s += fmt.Sprintf(" persistent %d", rs.PersistConn)
		}
		parts = append(parts, s)
	}
	return "destinations in list order: " + strings.Join(parts, "; ")
}

// trace records the decision: which virtual service, how the destination was found and
// why.
func (p *ipvsProxy) trace(ctx *netsim.Context, q ipvsemu.Packet, d ipvsemu.Decision, before string) {
	vs := d.Service
	ctx.Trace(netsim.TraceStep{Kind: netsim.StepNote, Detail: "IPVS virtual service " + serviceLabel(vs) + " for " + q.String()})
	if before != "" {
		ctx.Trace(netsim.TraceStep{Kind: netsim.StepNote, Detail: before})
	}
	var why string
	switch d.Via {
	case ipvsemu.ViaScheduler:
		why = "scheduler " + vs.Scheduler + " chose " + d.Dest.String() + ": " + schedulerWhy[vs.Scheduler]
		if vs.Flags&ipvs.FlagPersistent != 0 {
			why += "; a persistence template now sends " + q.Src.Addr().String() + "'s new connections there for " + fmt.Sprint(vs.Timeout) + " s"
		}
	case ipvsemu.ViaTemplate:
		why = "persistence template of " + q.Src.Addr().String() + " sent it to " + d.Dest.String() + " (the scheduler was not asked)"
		for _, e := range p.model.Connections() {
			if e.Template && e.Virtual == q.Dst && e.Client.Addr() == q.Src.Addr() {
				why += fmt.Sprintf("; template expires in %s, controls %d connections", e.Expires.Round(time.Second), e.Controls)
			}
		}
	case ipvsemu.ViaConnection:
		why = "existing connection entry sent it to " + d.Dest.String()
	default:
		why = d.Verdict.String() + ": " + d.Reason
	}
	if d.Conn != nil && !d.Conn.Template {
		why += fmt.Sprintf(" [entry %s %s -> %s -> %s %s, expires in %s]", d.Conn.Protocol, d.Conn.Client, d.Conn.Virtual, d.Conn.Dest, d.Conn.State, d.Conn.Expires.Round(time.Second))
	}
	ctx.Trace(netsim.TraceStep{Kind: netsim.StepNote, Verdict: strings.ToUpper(d.Verdict.String()), Detail: why})
}

// ---- access for tests, tools and traces ----

func ipvsOf(n *cluster.Node) *ipvsProxy {
	p, _ := n.Proxy().(*ipvsProxy)
	return p
}

// IPVSModel returns the IPVS model of a node running the IPVS mode (nil otherwise): its
// ipvsadm face (Listing, Rules, ConnListing) shows the node's virtual servers and
// connections.
func IPVSModel(n *cluster.Node) *ipvsemu.Model {
	if p := ipvsOf(n); p != nil {
		return p.model
	}
	return nil
}

// IPVSProxier returns a node's IPVS-mode proxier for a family (nil if none).
func IPVSProxier(n *cluster.Node, family corev1.IPFamily) *ipvs.Proxier {
	if p := ipvsOf(n); p != nil {
		for _, f := range p.fams {
			if f.family == family {
				return f.px
			}
		}
	}
	return nil
}

// IPVSEmulator returns the emulator holding an IPVS-mode node's iptables rules and
// ipsets for a family (nil if none).
func IPVSEmulator(n *cluster.Node, family corev1.IPFamily) *emulator.Emulator {
	if p := ipvsOf(n); p != nil {
		for _, f := range p.fams {
			if f.family == family {
				return f.emu
			}
		}
	}
	return nil
}

// IPVSHandlerStats counts an IPVS-mode node's decisions on first packets: connections
// scheduled, refused (no destination) and dropped.
func IPVSHandlerStats(n *cluster.Node) (scheduled, rejected, dropped uint64) {
	p := ipvsOf(n)
	if p == nil {
		return 0, 0, 0
	}
	p.stats.mu.Lock()
	defer p.stats.mu.Unlock()
	return p.stats.scheduled, p.stats.rejected, p.stats.dropped
}
