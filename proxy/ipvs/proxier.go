package ipvs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// DefaultScheduler is kube-proxy's --ipvs-scheduler default.
const DefaultScheduler = "rr"

// DefaultDummyDevice is the interface kube-proxy binds the virtual addresses to.
const DefaultDummyDevice = "kube-ipvs0"

// ProxierConfig configures kube-proxy's IPVS mode for one IP family. The zero value of
// each field is kube-proxy's default on a current kernel.
type ProxierConfig struct {
	// Family is the IP family the proxier handles; "" means IPv4.
	Family corev1.IPFamily
	// Node is the node and its kube-proxy flags (--nodeport-addresses,
	// --masquerade-all, --iptables-masquerade-bit, the local traffic detector).
	Node proxy.NodeConfig
	// Scheduler is --ipvs-scheduler (default rr). With mh every virtual server gets the
	// mh-port flag, as kube-proxy sets it.
	Scheduler string
	// ExcludeCIDRs is --ipvs-exclude-cidrs: virtual servers in these ranges are never
	// deleted as stale.
	ExcludeCIDRs []netip.Prefix
	// StrictARP is --ipvs-strict-arp (arp_ignore=1, arp_announce=2).
	StrictARP bool
	// TCPTimeout, TCPFinTimeout and UDPTimeout are --ipvs-tcp-timeout,
	// --ipvs-tcpfin-timeout and --ipvs-udp-timeout (ipvsadm --set); zero keeps the
	// kernel's value.
	TCPTimeout, TCPFinTimeout, UDPTimeout time.Duration
	// NoRandomFully leaves --random-fully off the MASQUERADE rule (old iptables).
	NoRandomFully bool
	// KernelVersion decides conn_reuse_mode: kube-proxy sets it to 0 on kernels from
	// 4.1 up to (not including) 5.9 and leaves it alone on newer ones (before 1.22: 0
	// on every kernel from 4.1). "" means a current kernel.
	KernelVersion string
	// DummyDevice is the interface the VIPs are bound to (default kube-ipvs0).
	DummyDevice string
}

// Proxier is kube-proxy's IPVS-mode proxier (pkg/proxy/ipvs/proxier.go) for one IP
// family. Each Sync reconciles, from the complete lists of Services and
// EndpointSlices:
//
//   - virtual servers through Interface: one per ClusterIP:port, per externalIP:port, per
//     LoadBalancer ingress IP:port and per node IP × NodePort, with the scheduler,
//     ClientIP affinity as persistence (-p timeout), mh-port for mh; real servers with
//     weight 1, graceful termination of the ones that go away (weight 0 while TCP
//     connections remain, deleted once they are gone or at once for UDP and SCTP);
//     stale virtual servers deleted;
//   - the dummy interface through Netlink: every ClusterIP, and every external and
//     LoadBalancer IP that is not already a node address, bound; the rest unbound;
//   - the ipsets through IPSets (ipset restore: created with -exist, entries diffed);
//   - the iptables rules through iptables.Interface (the jump rules ensured, then one
//     iptables-restore --noflush of the mode's chains);
//   - stale UDP conntrack entries through proxy.Conntrack.
//
// Differences from kube-proxy: Services, endpoints and real servers are walked in sorted
// order (kube-proxy walks Go maps), so real servers are added in endpoint string order
// and the kernel's list (newest first) is deterministic; errors kube-proxy only logs are
// returned in SyncResult.Warnings. A Proxier is not safe for concurrent use.
type Proxier struct {
	mu       sync.Mutex // Sync, GracefulCheck and Terminating may be called from different goroutines
	cfg      ProxierConfig
	ipv6     bool
	family   corev1.IPFamily
	sched    string
	dev      string
	mark     string // "0x00004000"
	nodeIP   netip.Addr
	detector proxy.LocalTrafficDetector
	npa      *proxy.NodePortAddresses

	ipvs  Interface
	sets  IPSets
	ipt   iptables.Interface
	nl    Netlink
	ct    proxy.Conntrack
	track *proxy.ChangeTracker

	graceful    *graceful
	initialSync bool
	state       *proxy.SyncState
	sysctls     []SysctlSetting

	rules      ruleWriter
	restoreBuf []byte
}

// SysctlSetting is one kernel parameter kube-proxy's IPVS mode sets.
type SysctlSetting struct {
	Name  string // /proc/sys path: "net/ipv4/vs/conntrack"
	Value int
}

func (s SysctlSetting) String() string { return s.Name + "=" + strconv.Itoa(s.Value) }

// Writers is what a Proxier writes through. IPVS, IPSets, IPTables and Netlink are
// required; Conntrack and Sysctl may be nil.
type Writers struct {
	IPVS      Interface
	IPSets    IPSets
	IPTables  iptables.Interface
	Netlink   Netlink
	Conntrack proxy.Conntrack
	Sysctl    Sysctl
}

// NewProxier returns a Proxier. Like kube-proxy's NewProxier it sets the sysctls the
// mode needs (through w.Sysctl, when given) and the IPVS timeouts (when configured).
func NewProxier(w Writers, cfg ProxierConfig) (*Proxier, error) {
	if w.IPVS == nil || w.IPSets == nil || w.IPTables == nil || w.Netlink == nil {
		return nil, errors.New("ipvs proxier: IPVS, IPSets, IPTables and Netlink writers are required")
	}
	if err := cfg.Node.Validate(); err != nil {
		return nil, fmt.Errorf("ipvs proxier: %w", err)
	}
	p := &Proxier{cfg: cfg, ipvs: w.IPVS, sets: w.IPSets, ipt: w.IPTables, nl: w.Netlink, ct: w.Conntrack, initialSync: true}
	switch cfg.Family {
	case "", corev1.IPv4Protocol:
		p.family = corev1.IPv4Protocol
	case corev1.IPv6Protocol:
		p.family, p.ipv6 = corev1.IPv6Protocol, true
	default:
		return nil, fmt.Errorf("ipvs proxier: family: %q is neither IPv4 nor IPv6", cfg.Family)
	}
	p.sched = cfg.Scheduler
	if p.sched == "" {
		p.sched = DefaultScheduler
	}
	if !slices.Contains(Schedulers(), p.sched) {
		return nil, fmt.Errorf("ipvs proxier: scheduler %q: want one of %s", p.sched, strings.Join(Schedulers(), ", "))
	}
	p.dev = cfg.DummyDevice
	if p.dev == "" {
		p.dev = DefaultDummyDevice
	}
	p.mark = fmt.Sprintf("%#08x", cfg.Node.MasqueradeMark())
	if ip, ok := cfg.Node.PrimaryIP(p.family); ok {
		p.nodeIP = ip
	}
	p.detector = cfg.Node.NewLocalTrafficDetector(p.family)
	npa, err := cfg.Node.ResolveNodePortAddresses(p.family)
	if err != nil {
		return nil, fmt.Errorf("ipvs proxier: %w", err)
	}
	p.npa = npa
	p.track = proxy.NewChangeTracker(p.family, cfg.Node)
	p.graceful = newGraceful(w.IPVS)

	var kernel netfilter.KernelVersion
	if cfg.KernelVersion != "" {
		if kernel, err = netfilter.ParseKernelVersion(cfg.KernelVersion); err != nil {
			return nil, fmt.Errorf("ipvs proxier: %w", err)
		}
	}
	sysctls := KubeProxySysctlsFor(&cfg.Node, kernel, cfg.StrictARP)
	p.sysctls = sysctls
	if w.Sysctl != nil {
		for _, s := range sysctls {
			if err := w.Sysctl.SetSysctl(s.Name, s.Value); err != nil {
				return nil, fmt.Errorf("ipvs proxier: can't set sysctl %s: %w", s, err)
			}
		}
	}
	if cfg.TCPTimeout > 0 || cfg.TCPFinTimeout > 0 || cfg.UDPTimeout > 0 {
		if err := w.IPVS.ConfigureTimeouts(cfg.TCPTimeout, cfg.TCPFinTimeout, cfg.UDPTimeout); err != nil {
			return nil, fmt.Errorf("ipvs proxier: configuring IPVS timeouts: %w", err)
		}
	}
	return p, nil
}

// KubeProxySysctlSettings returns the sysctls the newest kube-proxy's IPVS mode sets at
// start-up on a kernel of the given version ("" for a current one): vs/conntrack=1,
// vs/conn_reuse_mode=0 only on kernels 4.1 to 5.8 (#93297), vs/expire_nodest_conn=1,
// vs/expire_quiescent_template=1, ip_forward=1, and with strict ARP arp_ignore=1 and
// arp_announce=2. KubeProxySysctlsFor answers for a given release.
func KubeProxySysctlSettings(kernelVersion string, strictARP bool) ([]SysctlSetting, error) {
	var k netfilter.KernelVersion
	if kernelVersion != "" {
		v, err := netfilter.ParseKernelVersion(kernelVersion)
		if err != nil {
			return nil, err
		}
		k = v
	}
	return KubeProxySysctlsFor(&proxy.NodeConfig{}, k, strictARP), nil
}

// KubeProxySysctlsFor returns the sysctls node's kube-proxy release sets at start-up on
// kernel k (zero: a current kernel). vs/conn_reuse_mode=0 is written on kernels that have
// the knob (4.1 and later), from 1.22 only below 5.9 (change
// "ipvs-conn-reuse-mode-left-on-5.9").
func KubeProxySysctlsFor(node *proxy.NodeConfig, k netfilter.KernelVersion, strictARP bool) []SysctlSetting {
	out := []SysctlSetting{{"net/ipv4/vs/conntrack", 1}}
	if k.AtLeast(netfilter.KernelVersion{Major: 4, Minor: 1}) &&
		(!node.Has("ipvs-conn-reuse-mode-left-on-5.9") || !k.AtLeast(netfilter.KernelVersion{Major: 5, Minor: 9})) {
		out = append(out, SysctlSetting{"net/ipv4/vs/conn_reuse_mode", 0})
	}
	out = append(out, SysctlSetting{"net/ipv4/vs/expire_nodest_conn", 1},
		SysctlSetting{"net/ipv4/vs/expire_quiescent_template", 1},
		SysctlSetting{"net/ipv4/ip_forward", 1})
	if strictARP {
		out = append(out, SysctlSetting{"net/ipv4/conf/all/arp_ignore", 1}, SysctlSetting{"net/ipv4/conf/all/arp_announce", 2})
	}
	return out
}

func parseKernelVersion(s string) ([2]int, error) {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' || r == '+' })
	if len(f) < 2 {
		return [2]int{}, fmt.Errorf("kernel version %q: want MAJOR.MINOR[.PATCH]", s)
	}
	var v [2]int
	for i := range 2 {
		n, err := strconv.Atoi(f[i])
		if err != nil || n < 0 {
			return [2]int{}, fmt.Errorf("kernel version %q: want MAJOR.MINOR[.PATCH]", s)
		}
		v[i] = n
	}
	return v, nil
}

// Sysctls returns the sysctls the proxier set (or would set) at start-up.
func (p *Proxier) Sysctls() []SysctlSetting { return slices.Clone(p.sysctls) }

// Family returns the proxier's IP family.
func (p *Proxier) Family() corev1.IPFamily { return p.family }

// Scheduler returns the scheduler of every virtual server.
func (p *Proxier) Scheduler() string { return p.sched }

// DummyDevice returns the interface the VIPs are bound to.
func (p *Proxier) DummyDevice() string { return p.dev }

// State returns the view of the last successful Sync (nil before the first).
func (p *Proxier) State() *proxy.SyncState { return p.state }

// SyncResult reports what one Sync did.
type SyncResult struct {
	// JumpData is the restore input that created missing chains and inserted missing
	// jump rules (nil if nothing was missing).
	JumpData []byte
	// IPSetData is the ipset restore input; IPTablesData the iptables-restore input
	// (applied with --noflush --counters). IPTablesData shares the proxier's buffer:
	// it is valid until the next Sync.
	IPSetData, IPTablesData []byte
	// ServicePorts counts the view; VirtualServers the virtual servers it wants.
	ServicePorts, VirtualServers int
	// Changes to IPVS.
	VirtualServersAdded, VirtualServersUpdated, VirtualServersDeleted int
	RealServersAdded, RealServersDeleted, RealServersQuiesced         int
	// SetEntriesAdded and SetEntriesDeleted count the ipset changes.
	SetEntriesAdded, SetEntriesDeleted int
	// Bound and Unbound list the addresses added to and removed from the dummy
	// interface.
	Bound, Unbound []netip.Addr
	// ConntrackFilters were applied after the restore; ConntrackDeleted entries went.
	ConntrackFilters []proxy.ConntrackFilter
	ConntrackDeleted int
	// Warnings are failures kube-proxy only logs (one virtual server or real server
	// that could not be programmed, an address that could not be unbound, conntrack).
	Warnings []error
}

func (r *SyncResult) warn(err error) {
	if err != nil {
		r.Warnings = append(r.Warnings, err)
	}
}

// Sync brings IPVS, the dummy interface, the ipsets and the iptables rules in line with
// the complete current lists of Services and EndpointSlices (treated as immutable: pass
// a new object for a change). Objects that do not parse are an error before anything is
// written; a failed ipset or iptables restore ends the sync with an error (kube-proxy
// logs it and retries on its next sync).
//
// The steps, in order: the mode's chains and jump rules; the dummy interface; the
// addresses already on it and the node's own; per service port (in name order) its
// virtual servers, real servers and set entries; the ipsets, then the iptables rules
// that match them; stale addresses unbound; stale virtual servers deleted; stale UDP
// conntrack entries cleared.
func (p *Proxier) Sync(ctx context.Context, services []*corev1.Service, endpointSlices []*discoveryv1.EndpointSlice) (*SyncResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, err := p.track.Update(services, endpointSlices)
	if err != nil {
		return nil, fmt.Errorf("ipvs proxier: %w", err)
	}
	res := &SyncResult{ServicePorts: len(st.Services)}
	defer func() { p.initialSync = false }()

	if err := p.ensureChains(ctx, res); err != nil {
		return res, err
	}
	if _, err := p.nl.EnsureDummyDevice(p.dev); err != nil {
		return res, fmt.Errorf("ipvs proxier: dummy interface %s: %w", p.dev, err)
	}
	r := p.newSyncRun(st, res)
	for _, name := range st.Services.SortedNames() {
		r.servicePort(name)
	}
	for a := range r.activeBind {
		r.sets[SetIPVSAddresses].add(a.String())
	}
	res.VirtualServers = len(r.active)
	if err := p.writeSetsAndRules(ctx, r); err != nil {
		return res, err
	}
	p.unbindStale(r)
	p.deleteStaleVirtualServers(r)
	p.state = st
	p.cleanConntrack(st, res)
	return res, nil
}

// ensureChains creates the mode's chains that are missing and inserts its missing jump
// rules, with one restore (SyncResult.JumpData).
func (p *Proxier) ensureChains(ctx context.Context, res *SyncResult) error {
	saved, err := p.ipt.Save(ctx, tableFilter, tableNAT)
	if err != nil {
		return fmt.Errorf("ipvs proxier: iptables-save: %w", err)
	}
	if jd := jumpRestore(iptables.ParseSave(saved)); jd != nil {
		res.JumpData = jd
		if err := p.ipt.Restore(ctx, jd, iptables.RestoreOptions{NoFlush: true}); err != nil {
			return fmt.Errorf("ipvs proxier: ensuring chains and jump rules: %w", err)
		}
	}
	return nil
}

// syncRun is the working state of one Sync: the ipsets being filled, the node's
// addresses, and what the service ports asked for so far.
type syncRun struct {
	p       *Proxier
	st      *proxy.SyncState
	res     *SyncResult
	sets    map[string]*ipset
	setList []*ipset // in kube-proxy's ipsetInfo order

	alreadyBound map[netip.Addr]bool // on the dummy interface (grows as addresses are bound)
	nodeAddrs    map[netip.Addr]bool // the node's own addresses (not on the dummy interface)
	nodeIPs      []netip.Addr        // the addresses NodePorts are served on

	active     map[string]bool     // the virtual servers wanted, by vsString
	activeBind map[netip.Addr]bool // the addresses wanted on the dummy interface
	noNode     []noNodeAccess
}

// newSyncRun makes the sync's empty ipsets and reads the node's addresses.
func (p *Proxier) newSyncRun(st *proxy.SyncState, res *SyncResult) *syncRun {
	r := &syncRun{p: p, st: st, res: res, sets: map[string]*ipset{}, setList: make([]*ipset, 0, len(setInfos)),
		active: map[string]bool{}, activeBind: map[netip.Addr]bool{}}
	for _, si := range setInfos {
		size := 0
		switch si.name {
		case SetClusterIP, SetIPVSAddresses, SetLoopBack:
			size = len(st.Services)
		}
		s := &ipset{info: si, name: SetName(si.name, p.ipv6), ipv6: p.ipv6, active: make(map[string]bool, size)}
		r.sets[si.name] = s
		r.setList = append(r.setList, s)
	}
	all := r.readAddresses()
	if r.needNodeIPs() {
		r.nodeIPs = p.nodePortIPs(r.nodeAddrs, all)
	}
	return r
}

// readAddresses fills alreadyBound and nodeAddrs and returns every local address.
// Node addresses are the local addresses of the family except those on the dummy
// interface (loopback and IPv6 link-local left out, as kube-proxy's netlink handle
// does).
func (r *syncRun) readAddresses() []netip.Addr {
	p := r.p
	bound, err := p.nl.LocalAddresses(p.dev)
	if err != nil {
		r.res.warn(fmt.Errorf("listing addresses on %s: %w", p.dev, err))
	}
	r.alreadyBound = map[netip.Addr]bool{}
	for _, a := range bound {
		if p.ofFamily(a) {
			r.alreadyBound[a.Unmap()] = true
		}
	}
	all, err := p.nl.LocalAddresses("")
	if err != nil {
		r.res.warn(fmt.Errorf("listing node addresses: %w", err))
	}
	r.nodeAddrs = map[netip.Addr]bool{}
	for _, a := range all {
		a = a.Unmap()
		if p.ofFamily(a) && !r.alreadyBound[a] && !a.IsLoopback() && !(p.ipv6 && a.IsLinkLocalUnicast()) {
			r.nodeAddrs[a] = true
		}
	}
	return all
}

// needNodeIPs reports whether any service port has a NodePort.
func (r *syncRun) needNodeIPs() bool {
	for _, sp := range r.st.Services {
		if sp.NodePort != 0 {
			return true
		}
	}
	return false
}

// nodePortIPs returns the addresses NodePorts are served on: every node address, or
// with --nodeport-addresses the local addresses of the family it selects (loopback
// left out).
func (p *Proxier) nodePortIPs(nodeAddrs map[netip.Addr]bool, all []netip.Addr) []netip.Addr {
	var nodeIPs []netip.Addr
	if p.npa.MatchAll() {
		for a := range nodeAddrs {
			nodeIPs = append(nodeIPs, a)
		}
		slices.SortFunc(nodeIPs, func(a, b netip.Addr) int { return a.Compare(b) })
		return nodeIPs
	}
	var local []netip.Addr
	for _, a := range all {
		if a = a.Unmap(); p.ofFamily(a) {
			local = append(local, a)
		}
	}
	for _, a := range p.npa.NodeIPs(local) {
		if !a.IsLoopback() {
			nodeIPs = append(nodeIPs, a)
		}
	}
	return nodeIPs
}

// writeSetsAndRules applies the ipsets (entries diffed against ipset save), then the
// iptables rules that match them.
func (p *Proxier) writeSetsAndRules(ctx context.Context, r *syncRun) error {
	res := r.res
	savedSets, err := p.sets.SaveIPSets(ctx)
	if err != nil {
		return fmt.Errorf("ipvs proxier: ipset save: %w", err)
	}
	var setData bytes.Buffer
	res.SetEntriesAdded, res.SetEntriesDeleted = writeSetRestore(&setData, r.setList, parseSavedSets(savedSets))
	res.IPSetData = setData.Bytes()
	if err := p.sets.RestoreIPSets(ctx, res.IPSetData); err != nil {
		return fmt.Errorf("ipvs proxier: ipset restore: %w", err)
	}
	res.IPTablesData = p.writeRules(r.sets, r.noNode)
	if err := p.ipt.Restore(ctx, res.IPTablesData, iptables.RestoreOptions{NoFlush: true, Counters: true}); err != nil {
		return fmt.Errorf("ipvs proxier: iptables-restore: %w", err)
	}
	return nil
}

// unbindStale removes from the dummy interface the addresses no longer used, in
// address order.
func (p *Proxier) unbindStale(r *syncRun) {
	var stale []netip.Addr
	for a := range r.alreadyBound {
		if !r.activeBind[a] {
			stale = append(stale, a)
		}
	}
	slices.SortFunc(stale, func(a, b netip.Addr) int { return a.Compare(b) })
	for _, a := range stale {
		if err := p.nl.UnbindAddress(p.dev, a); err != nil {
			r.res.warn(fmt.Errorf("unbinding %s from %s: %w", a, p.dev, err))
			continue
		}
		r.res.Unbound = append(r.res.Unbound, a)
	}
}

// deleteStaleVirtualServers deletes the virtual servers of the family no longer used,
// except fwmark ones and those in --ipvs-exclude-cidrs.
func (p *Proxier) deleteStaleVirtualServers(r *syncRun) {
	current, err := p.ipvs.GetVirtualServers()
	if err != nil {
		r.res.warn(fmt.Errorf("listing virtual servers: %w", err))
	}
	for _, vs := range current {
		if vs.FWMark != 0 || !vs.Address.IsValid() || !p.ofFamily(vs.Address) || p.excluded(vs.Address) || r.active[vsString(vs)] {
			continue
		}
		if err := p.ipvs.DeleteVirtualServer(vs); err != nil {
			r.res.warn(fmt.Errorf("deleting virtual server %s: %w", vsString(vs), err))
			continue
		}
		r.res.VirtualServersDeleted++
	}
}

// cleanConntrack clears the stale UDP conntrack entries of the new view.
func (p *Proxier) cleanConntrack(st *proxy.SyncState, res *SyncResult) {
	res.ConntrackFilters = st.StaleConntrackFilters()
	if p.ct != nil && len(res.ConntrackFilters) > 0 {
		n, err := proxy.CleanStaleConntrack(p.ct, res.ConntrackFilters)
		res.ConntrackDeleted = n
		res.warn(err)
	}
}

func (p *Proxier) ofFamily(a netip.Addr) bool { return a.Unmap().Is6() == p.ipv6 }

func (p *Proxier) excluded(a netip.Addr) bool {
	for _, c := range p.cfg.ExcludeCIDRs {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

// vsEqual is kube-proxy's VirtualServer.Equal.
func vsEqual(a, b *VirtualServer) bool {
	return a.Address == b.Address && a.Protocol == b.Protocol && a.Port == b.Port &&
		a.Scheduler == b.Scheduler && a.Flags&^FlagHashed == b.Flags&^FlagHashed && a.Timeout == b.Timeout
}

// syncService is kube-proxy's syncService: create or update the virtual server, then
// bind its address to the dummy interface.
func (p *Proxier) syncService(vs *VirtualServer, bind bool, alreadyBound map[netip.Addr]bool, res *SyncResult) error {
	applied, err := p.ipvs.GetVirtualServer(vs)
	if err != nil && !IsNotFound(err) {
		return err
	}
	switch {
	case applied == nil:
		if err := p.ipvs.AddVirtualServer(vs); err != nil {
			return err
		}
		res.VirtualServersAdded++
	case !vsEqual(applied, vs):
		if err := p.ipvs.UpdateVirtualServer(vs); err != nil {
			return err
		}
		res.VirtualServersUpdated++
	}
	if bind && !alreadyBound[vs.Address] {
		if err := p.nl.BindAddress(p.dev, vs.Address); err != nil {
			return fmt.Errorf("binding %s to %s: %w", vs.Address, p.dev, err)
		}
		alreadyBound[vs.Address] = true
		res.Bound = append(res.Bound, vs.Address)
	}
	return nil
}

// syncEndpoints is kube-proxy's syncEndpoint: add the real servers of new endpoints
// (weight 1), take back endpoints that were being terminated, and terminate gracefully
// the real servers of endpoints that are gone.
func (p *Proxier) syncEndpoints(vs *VirtualServer, endpoints []*proxy.Endpoint, res *SyncResult) error {
	cur, err := p.ipvs.GetRealServers(vs)
	if err != nil {
		return err
	}
	curSet := make(map[string]*RealServer, len(cur))
	for _, rs := range cur {
		curSet[rsString(rs)] = rs
	}
	want := make(map[string]bool, len(endpoints))
	var errs []error
	for _, ep := range endpoints {
		key := ep.String()
		if want[key] {
			continue
		}
		want[key] = true
		rs := &RealServer{Address: ep.IP, Port: uint16(ep.Port), Weight: 1}
		if old, ok := curSet[key]; ok {
			if p.initialSync && old.Weight != rs.Weight {
				// After a restart every weight goes back to 1.
				if err := p.ipvs.UpdateRealServer(vs, rs); err != nil {
					errs = append(errs, fmt.Errorf("resetting weight of %s: %w", key, err))
				}
			}
			if len(p.graceful.list) == 0 {
				continue
			}
			name := uniqueRSName(vs, rs)
			if !p.graceful.inList(name) {
				continue
			}
			// The endpoint came back while its real server was being terminated:
			// delete it and add it again.
			if err := p.graceful.moveOut(name); err != nil {
				errs = append(errs, fmt.Errorf("taking back %s: %w", key, err))
				continue
			}
		}
		if err := p.ipvs.AddRealServer(vs, rs); err != nil {
			errs = append(errs, fmt.Errorf("adding %s: %w", key, err))
			continue
		}
		res.RealServersAdded++
	}
	var gone []string
	for key := range curSet {
		if !want[key] {
			gone = append(gone, key)
		}
	}
	slices.Sort(gone)
	for _, key := range gone {
		rs := curSet[key]
		if len(p.graceful.list) > 0 && p.graceful.inList(uniqueRSName(vs, rs)) {
			continue
		}
		deleted, err := p.graceful.gracefulDelete(vs, &RealServer{Address: rs.Address, Port: rs.Port})
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w", key, err))
		}
		if deleted {
			res.RealServersDeleted++
		} else if err == nil {
			res.RealServersQuiesced++
		}
	}
	return errors.Join(errs...)
}

// GracefulCheck is the graceful termination manager's periodic pass (kube-proxy runs it
// every GracefulCheckInterval): it deletes the real servers being terminated whose
// connections are gone and returns their names ("vip:port/PROTO/rip:port").
func (p *Proxier) GracefulCheck() ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.graceful.tryDelete()
}

// Terminating lists the real servers being terminated ("vip:port/PROTO/rip:port").
func (p *Proxier) Terminating() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.graceful.names()
}
