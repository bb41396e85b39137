package hostlink

import (
	"fmt"
	"net/netip"
)

// DefaultTUNName is the TUN device's name unless TUNConfig.Name says otherwise.
const DefaultTUNName = "clab0"

// tunAlias marks a device as clusterlab up's, so that a later start may remove it.
const tunAlias = "clusterlab-up"

// TUNConfig describes the TUN device OpenTUN makes.
type TUNConfig struct {
	// Name is the device's name (default clab0).
	Name string
	// Routes are the prefixes routed into the cluster through the device. Default: the
	// service CIDRs, the pod CIDRs and each node's addresses.
	Routes []netip.Prefix
	// Force installs the routes even where they overlap routes the host has.
	Force bool
	// Netns, if set, is the named network namespace to make the device in (tests);
	// default the process's own.
	Netns string
	// Via is the node the device's host routes the service network through (default
	// the first node).
	Via string
}

// defaultRoutes are the service CIDRs, the pod CIDRs and the node addresses.
func defaultRoutes(services, pods []netip.Prefix, nodes []netip.Addr) []netip.Prefix {
	var rs []netip.Prefix
	rs = append(rs, services...)
	rs = append(rs, pods...)
	for _, a := range nodes {
		rs = append(rs, netip.PrefixFrom(a, a.BitLen()))
	}
	return rs
}

// overlaps lists the host's routes that overlap ours: every route but default routes
// (a /0 is less specific than anything we add, and only loses traffic it would have
// sent nowhere useful) and routes on our own device.
func overlaps(ours []netip.Prefix, host []hostRoute, dev string) []string {
	var out []string
	for _, o := range ours {
		for _, h := range host {
			if h.dst.Bits() == 0 || h.dev == dev || h.dst.Addr().Is4() != o.Addr().Is4() {
				continue
			}
			if h.dst.Overlaps(o) {
				out = append(out, fmt.Sprintf("%s overlaps the route %s dev %s", o, h.dst, h.dev))
			}
		}
	}
	return out
}

// hostRoute is a route of the host's main table.
type hostRoute struct {
	dst netip.Prefix
	dev string
}
