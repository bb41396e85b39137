package kernelrun

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/kernel"
)

// The cluster's DNS on the kernel: the CoreDNS pods of kube-dns (kube-system, label
// k8s-app=kube-dns) run the project's cluster DNS server (package dns, answering from
// the simulated API server) on port 53 over UDP and TCP in their namespaces, and a pod's
// resolver (its resolv.conf as its kubelet writes it) sends real queries from the pod's
// namespace to the kube-dns Service address, through each node's kube-proxy rules.
// Names outside the cluster are answered from the simulation's upstream zone in-process
// (the upstream's host is not built on the kernel).

// isDNSPod says whether a pod (NS/NAME and its labels) is one of kube-dns's.
func isDNSPod(ns string, labels map[string]string) bool {
	return ns == "kube-system" && labels["k8s-app"] == "kube-dns"
}

// startDNSServer creates the cluster DNS server the DNS pods answer with, when the
// cluster has kube-dns.
func (d *Datapath) startDNSServer(c *cluster.Cluster) error {
	if _, ok := c.Store().GetService("kube-system", "kube-dns"); !ok {
		return nil
	}
	cfg := dns.Config{Zones: []string{"cluster.local"}, TTL: 30, Pods: dns.PodsInsecure, Now: c.Clock().Now}
	// Names outside the cluster go to the simulation's upstream zone, answered
	// in-process (its host is the simulation's, not a namespace).
	if web := c.ExternalHost(dns.WebHostName); web != nil {
		z, err := dns.NewZoneUpstream(strings.ReplaceAll(dns.DefaultUpstreamZone, "{web}", web.IP().String()))
		if err != nil {
			return fmt.Errorf("cluster DNS upstream: %w", err)
		}
		cfg.Upstream = z
	}
	srv, err := dns.New(c.Store(), cfg)
	if err != nil {
		return fmt.Errorf("cluster DNS: %w", err)
	}
	d.dnsSrv = srv
	return nil
}

// serveDNS runs the DNS server on port 53 (UDP and TCP) inside a DNS pod's namespace.
func (d *Datapath) serveDNS(p *kernel.Pod) error {
	if d.dnsSrv == nil {
		return nil
	}
	var pc net.PacketConn
	var l net.Listener
	err := d.h.Do(p.Netns, func() error {
		var err error
		if pc, err = net.ListenPacket("udp", ":53"); err != nil {
			return err
		}
		if l, err = net.Listen("tcp", ":53"); err != nil {
			pc.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("DNS server in pod %s: %w", p.Name, err)
	}
	udp := &mdns.Server{PacketConn: pc, Handler: d.dnsSrv}
	tcp := &mdns.Server{Listener: l, Handler: d.dnsSrv}
	for _, s := range []*mdns.Server{udp, tcp} {
		go func() { _ = s.ActivateAndServe() }()
	}
	d.dnsStops[p.Name] = func() {
		for _, s := range []*mdns.Server{udp, tcp} {
			if err := s.Shutdown(); err != nil { // not started yet: close its socket
				if s.PacketConn != nil {
					s.PacketConn.Close()
				}
				if s.Listener != nil {
					s.Listener.Close()
				}
			}
		}
	}
	return nil
}

// stopDNS stops a pod's DNS server, if it has one.
func (d *Datapath) stopDNS(name string) {
	if stop := d.dnsStops[name]; stop != nil {
		stop()
		delete(d.dnsStops, name)
	}
}

// DNSDialer implements scenario.Datapath: a pod's resolver dials from the pod's
// namespace (nil without kube-dns on the kernel, or for a source that is not a pod).
func (d *Datapath) DNSDialer(from string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.dnsSrv == nil {
		return nil
	}
	ns, err := d.source(from)
	if err != nil {
		return nil
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := d.h.Do(ns, func() error {
			var err error
			dl := net.Dialer{Timeout: 5 * time.Second}
			c, err = dl.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}
