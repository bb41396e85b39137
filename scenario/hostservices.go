package scenario

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
)

// HostService is a server on the real machine that pods reach at an address of the
// simulated network: a pod's TCP connection to Address leaves its node through the
// datapath (kube-proxy's rules, masquerade and all), reaches a host on the external
// network that owns Address, and is relayed there to Target, a real socket. So a real
// service under test can stand behind a simulated Service (one without a selector,
// with an EndpointSlice naming Address) and be called by simulated pods. Only the
// addresses and ports listed are reachable: a connection to another port of Address
// is refused.
type HostService struct {
	// Name labels the service in messages (default: its address).
	Name string `yaml:"name,omitempty"`
	// Address is IP:PORT in the simulated network (required). The IP must lie outside
	// the node, pod, service, load-balancer and external networks (192.0.2.0/24 is a
	// good choice); several services may share an IP with different ports.
	Address string `yaml:"address"`
	// Target is the real server, HOST:PORT (default 127.0.0.1 and Address's port).
	Target string `yaml:"target,omitempty"`
}

// hostService is a checked HostService.
type hostService struct {
	name   string
	addr   netip.AddrPort
	target string
}

// hostServiceHostName names the external host that owns the host services' addresses
// of one IP (the i-th such IP, from 0).
func hostServiceHostName(i int) string {
	if i == 0 {
		return "host-services"
	}
	return "host-services-" + strconv.Itoa(i+1)
}

// hostServices checks host_services: addresses outside the cluster's networks, no
// address listed twice, targets that parse.
func (pr *preparer) hostServices() {
	cfg := pr.p.cfg
	nets := map[string][]netip.Prefix{
		"node_cidr":          orPrefixes(cfg.NodeCIDRs, "172.18.0.0/16"),
		"pod_cidr":           orPrefixes(cfg.ClusterCIDRs, "10.244.0.0/16"),
		"service_cidr":       orPrefixes(cfg.ServiceCIDRs, "10.96.0.0/12"),
		"load_balancer_cidr": orPrefixes(nonZero(cfg.LoadBalancerCIDR), "198.51.100.0/24"),
		"external_cidr":      orPrefixes(nonZero(cfg.ExternalCIDR), "203.0.113.0/24"),
	}
	seen := map[netip.AddrPort]int{}
	for i, hs := range pr.s.HostServices {
		fp := fmt.Sprintf("host_services[%d]", i)
		if hs.Address == "" {
			pr.fail(fp+".address", "required: IP:PORT where pods reach the service")
			continue
		}
		ap, err := netip.ParseAddrPort(hs.Address)
		if err != nil || ap.Port() == 0 {
			pr.fail(fp+".address", "want IP:PORT with a port of 1-65535, got %q", hs.Address)
			continue
		}
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		a := ap.Addr()
		if a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || a.IsLinkLocalUnicast() {
			pr.fail(fp+".address", "%s is not a usable unicast address", a)
			continue
		}
		bad := false
		for _, field := range []string{"node_cidr", "pod_cidr", "service_cidr", "load_balancer_cidr", "external_cidr"} {
			for _, p := range nets[field] {
				if p.Contains(a) {
					pr.fail(fp+".address", "%s is inside cluster.%s (%s); pick an address outside the cluster's networks, such as 192.0.2.10", a, field, p)
					bad = true
				}
			}
		}
		for j, h := range pr.c.ExternalHosts {
			if ip, err := netip.ParseAddr(h.IP); err == nil && ip == a {
				pr.fail(fp+".address", "%s is the address of cluster.external_hosts[%d] (%s)", a, j, h.Name)
				bad = true
			}
		}
		if j, dup := seen[ap]; dup {
			pr.fail(fp+".address", "%s is listed twice (host_services[%d])", ap, j)
			bad = true
		}
		seen[ap] = i
		target := hs.Target
		if target == "" {
			target = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ap.Port())))
		} else if host, port, err := net.SplitHostPort(target); err != nil || host == "" {
			pr.fail(fp+".target", "want HOST:PORT of the real server, got %q", target)
			bad = true
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			pr.fail(fp+".target", "want a port of 1-65535, got %q", port)
			bad = true
		}
		if bad {
			continue
		}
		name := hs.Name
		if name == "" {
			name = ap.String()
		}
		pr.p.hostServices = append(pr.p.hostServices, hostService{name: name, addr: ap, target: target})
	}
	for i := range len(pr.p.hostServiceIPs()) {
		name := hostServiceHostName(i)
		for j, h := range pr.c.ExternalHosts {
			if h.Name == name {
				pr.fail(fmt.Sprintf("cluster.external_hosts[%d].name", j), "%q is the name of the host that owns host_services' addresses", name)
			}
		}
	}
}

func orPrefixes(ps []netip.Prefix, def string) []netip.Prefix {
	if len(ps) > 0 {
		return ps
	}
	return []netip.Prefix{netip.MustParsePrefix(def)}
}

func nonZero(p netip.Prefix) []netip.Prefix {
	if p.IsValid() {
		return []netip.Prefix{p}
	}
	return nil
}

// hostServiceIPs are the distinct IPs of the host services, in the order listed.
func (p *plan) hostServiceIPs() []netip.Addr {
	var ips []netip.Addr
	for _, hs := range p.hostServices {
		found := false
		for _, ip := range ips {
			found = found || ip == hs.addr.Addr()
		}
		if !found {
			ips = append(ips, hs.addr.Addr())
		}
	}
	return ips
}

// hostRelay relays the host services' connections from the simulation to the real
// targets.
type hostRelay struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	lns    []net.Listener
	conns  map[net.Conn]bool
}

// startHostServices adds one external host per IP of the host services, listening on
// their ports, and relays each connection accepted to its target.
func (p *plan) startHostServices(c *cluster.Cluster) (*hostRelay, error) {
	if len(p.hostServices) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	hr := &hostRelay{ctx: ctx, cancel: cancel, conns: map[net.Conn]bool{}}
	for i, ip := range p.hostServiceIPs() {
		h, err := c.AddExternalHostWith(netsim.ExternalHostConfig{Name: hostServiceHostName(i), Addrs: []netip.Addr{ip}})
		if err != nil {
			hr.close()
			return nil, fmt.Errorf("host_services: %w", err)
		}
		for _, hs := range p.hostServices {
			if hs.addr.Addr() != ip {
				continue
			}
			ln, err := h.Net().Listen("tcp", hs.addr.String())
			if err != nil {
				hr.close()
				return nil, fmt.Errorf("host_services: %s: %w", hs.name, err)
			}
			hr.lns = append(hr.lns, ln)
			hr.wg.Add(1)
			go hr.serve(ln, hs)
		}
	}
	return hr, nil
}

func (hr *hostRelay) serve(ln net.Listener, hs hostService) {
	defer hr.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		hr.wg.Add(1)
		go hr.relay(c, hs)
	}
}

// relay dials the target for one accepted connection and copies both ways; a target
// that cannot be reached resets the simulated connection (it was accepted already).
func (hr *hostRelay) relay(in net.Conn, hs hostService) {
	defer hr.wg.Done()
	d := net.Dialer{Timeout: 5 * time.Second}
	out, err := d.DialContext(hr.ctx, "tcp", hs.target)
	if err != nil {
		in.Close()
		return
	}
	if !hr.track(in, out) {
		return
	}
	defer hr.untrack(in, out)
	netsim.Splice(in, out)
}

func (hr *hostRelay) track(cs ...net.Conn) bool {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	if hr.ctx.Err() != nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		hr.conns[c] = true
	}
	return true
}

func (hr *hostRelay) untrack(cs ...net.Conn) {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	for _, c := range cs {
		delete(hr.conns, c)
	}
}

// close stops listening, closes every relayed connection and waits for the relays.
func (hr *hostRelay) close() {
	if hr == nil {
		return
	}
	hr.cancel()
	hr.mu.Lock()
	for _, ln := range hr.lns {
		ln.Close()
	}
	for c := range hr.conns {
		c.Close()
	}
	hr.mu.Unlock()
	hr.wg.Wait()
}
