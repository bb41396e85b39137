package scenario

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/netsim"
)

// Live is a scenario's cluster running in real time, for real programs to use
// (clusterlab up): its manifests applied and every proxy synced as Run does before the
// first step, its host_services relayed, its clock following the wall clock (so
// conntrack timeouts and TCP timers run as on a real machine). Its steps are not run.
// Close stops it.
type Live struct {
	r *runner
}

// Start builds the scenario's cluster and leaves it running (see Live). Errors are as
// Run's: IsInputError tells a bad scenario apart.
func Start(s *Scenario, opts Options) (*Live, error) {
	p, err := s.prepareFor(opts)
	if err != nil {
		return nil, err
	}
	p.cfg.ManualClock = false
	r, err := p.start()
	if err != nil {
		return nil, err
	}
	return &Live{r: r}, nil
}

// Cluster is the running cluster.
func (l *Live) Cluster() *cluster.Cluster { return l.r.c }

// Report describes the cluster as a run's report does (nodes, Services, pods, mode,
// notes), with no steps.
func (l *Live) Report() *Report { return l.r.newReport() }

// DNS says how names are resolved ("kube-dns", "direct" or "off") and, unless off, the
// cluster DNS service address pods are given.
func (l *Live) DNS() (mode string, server netip.Addr) {
	if l.r.res == nil {
		return "off", netip.Addr{}
	}
	a, _ := netip.ParseAddr(l.r.res.dnsIP)
	return l.r.res.mode, a
}

// HostServices lists host_services as "NAME: ADDRESS -> TARGET".
func (l *Live) HostServices() []string {
	var out []string
	for _, hs := range l.r.p.hostServices {
		out = append(out, fmt.Sprintf("%s: %s -> %s", hs.name, hs.addr, hs.target))
	}
	return out
}

// Net returns the network of a place: pod:NAMESPACE/NAME, node:NAME or external:NAME.
// Its Dial resolves names with the place's resolver.
func (l *Live) Net(place string) (*netsim.Net, error) {
	n, err := l.r.netOf(place)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, fmt.Errorf("%s has no network stack (a raw host)", place)
	}
	return n, nil
}

// HostConfig describes a host AddHost adds to the running cluster.
type HostConfig struct {
	// Name is the external host's name (external:NAME).
	Name string
	// Via is the node the host routes the service network through (default the
	// first node), as `ip route add SERVICE-CIDR via NODE-IP` would on a real machine.
	Via string
	// Deliver, if set, makes a raw host (a TUN device's side): see
	// netsim.ExternalHostConfig.Deliver.
	Deliver func([]byte)
}

// AddHost adds an external host that stands for this machine in the cluster: on the
// external network, with a route for the service network through a node, and (unless
// raw) a resolver that asks the cluster DNS as a pod of the default namespace would
// (search default.svc.cluster.local svc.cluster.local cluster.local, ndots:5), so
// "my-service" and "my-service.default.svc.cluster.local" both resolve.
func (l *Live) AddHost(cfg HostConfig) (*netsim.ExternalHost, error) {
	c := l.r.c
	via := c.Nodes()[0]
	if cfg.Via != "" {
		if via = c.Node(cfg.Via); via == nil {
			return nil, fmt.Errorf("no node %q", cfg.Via)
		}
	}
	var routes []netsim.ExternalRoute
	for _, p := range c.Config().ServiceCIDRs {
		routes = append(routes, netsim.ExternalRoute{Prefix: p, Via: via.Node})
	}
	h, err := c.AddExternalHostWith(netsim.ExternalHostConfig{Name: cfg.Name, Routes: routes, Deliver: cfg.Deliver})
	if err != nil {
		return nil, err
	}
	if h.Net() != nil && l.r.res != nil {
		h.Net().Resolver = hostStubFor(l.HostResolvConf(), l.r.res, h.Net()).resolve
	}
	return h, nil
}

// HostResolvConf is the resolv.conf AddHost's hosts resolve with.
func (l *Live) HostResolvConf() dns.ResolvConf {
	conf := dns.ResolvConf{Searches: []string{"default.svc." + clusterDomain, "svc." + clusterDomain, clusterDomain}, Options: []string{"ndots:5"}}
	if l.r.res != nil {
		conf.Nameservers = []string{l.r.res.dnsIP}
	}
	return conf
}

type hostStub struct{ *dns.Stub }

// hostStubFor is a host's stub resolver: in-process in the direct DNS mode, over the
// host's network to kube-dns otherwise.
func hostStubFor(conf dns.ResolvConf, res *resolver, n *netsim.Net) hostStub {
	if res.mode == "direct" {
		return hostStub{dns.NewStub(conf, func(ctx context.Context, network, _ string) (net.Conn, error) {
			return newMemConn(res.srv, network), nil
		})}
	}
	return hostStub{dns.NewStub(conf, n.DialContext)}
}

func (s hostStub) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	return s.LookupNetIP(ctx, "ip", host)
}

// Close stops the cluster and everything Start started.
func (l *Live) Close() { l.r.close() }
