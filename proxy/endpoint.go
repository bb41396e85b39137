package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Endpoint is kube-proxy's view of one endpoint of one service port (its
// BaseEndpointInfo), built from an EndpointSlice entry for one node.
type Endpoint struct {
	IP   netip.Addr
	Port int
	// NodeName and Zone are the EndpointSlice entry's nodeName and zone ("" if unset).
	NodeName string
	Zone     string
	Hostname string
	// Ready, Serving and Terminating are the entry's conditions with kube-proxy's
	// defaults for unset values: ready true, serving true, terminating false.
	Ready       bool
	Serving     bool
	Terminating bool
	// Local is true when the endpoint runs on the node the view was built for.
	Local bool
	// ZoneHints and NodeHints are hints.forZones[].name and hints.forNodes[].name, in
	// slice order. Node hints are dropped when NodeConfig.IgnoreNodeHints is set (the
	// PreferSameTrafficDistribution feature gate off).
	ZoneHints []string
	NodeHints []string

	str   string
	ipStr string
}

// NewEndpoint returns an endpoint at ip:port, ready and serving, not local.
func NewEndpoint(ip netip.Addr, port int) *Endpoint {
	e := &Endpoint{IP: ip, Port: port, Ready: true, Serving: true}
	e.cache()
	return e
}

// cache computes String and IPString with one allocation: "ip:port" or "[ip]:port",
// the address being a substring of it.
func (e *Endpoint) cache() {
	var buf [64]byte
	b, ip0, ip1 := e.appendString(buf[:0])
	e.str = string(b)
	e.ipStr = e.str[ip0:ip1]
}

// appendString appends "ip:port" or "[ip]:port" to b and returns where the address
// is in it.
func (e *Endpoint) appendString(b []byte) (out []byte, ipStart, ipEnd int) {
	v6 := e.IP.Is6()
	if v6 {
		b = append(b, '[')
	}
	ipStart = len(b)
	b = e.IP.AppendTo(b)
	ipEnd = len(b)
	if v6 {
		b = append(b, ']')
	}
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(e.Port), 10)
	return b, ipStart, ipEnd
}

// cacheEndpoints is cache for each of eps, with one allocation for all of their
// strings (one slice's endpoints of one port).
func cacheEndpoints(eps []Endpoint) {
	const max = 64
	if len(eps) > max {
		for i := range eps {
			eps[i].cache()
		}
		return
	}
	var spans [max][3]int // where each endpoint's address starts and ends, and where it ends
	var sb strings.Builder
	sb.Grow(24 * len(eps))
	var buf [64]byte
	for i := range eps {
		b, ip0, ip1 := eps[i].appendString(buf[:0])
		n := sb.Len()
		sb.Write(b)
		spans[i] = [3]int{n + ip0, n + ip1, sb.Len()}
	}
	all, start := sb.String(), 0
	for i := range eps {
		sp := spans[i]
		eps[i].str, eps[i].ipStr = all[start:sp[2]], all[sp[0]:sp[1]]
		start = sp[2]
	}
}

// String returns "ip:port", or "[ip]:port" for IPv6 (net.JoinHostPort), the form
// kube-proxy hashes into KUBE-SEP names and writes in DNAT targets.
func (e *Endpoint) String() string {
	if e.str != "" {
		return e.str
	}
	return net.JoinHostPort(e.IP.String(), strconv.Itoa(e.Port))
}

// IPString returns the endpoint's address as text.
func (e *Endpoint) IPString() string {
	if e.ipStr != "" {
		return e.ipStr
	}
	return e.IP.String()
}

// HasZoneHint reports whether the endpoint is hinted for the zone.
func (e *Endpoint) HasZoneHint(zone string) bool { return slices.Contains(e.ZoneHints, zone) }

// HasNodeHint reports whether the endpoint is hinted for the node.
func (e *Endpoint) HasNodeHint(node string) bool { return slices.Contains(e.NodeHints, node) }

// EndpointsMap holds the endpoints of every service port, each list sorted by the
// endpoint string (string order, so "10.1.1.11:11" sorts before "10.1.1.1:11"), as
// kube-proxy's EndpointSliceCache returns them.
type EndpointsMap map[ServicePortName][]*Endpoint

// LocalReadyEndpoints maps each Service to the number of distinct ready endpoint IPs on
// this node (what the health-check node port reports).
func (em EndpointsMap) LocalReadyEndpoints() map[types.NamespacedName]int {
	ips := make(map[types.NamespacedName]map[netip.Addr]bool)
	for name, eps := range em {
		for _, ep := range eps {
			if !ep.Ready || !ep.Local {
				continue
			}
			if ips[name.NamespacedName] == nil {
				ips[name.NamespacedName] = make(map[netip.Addr]bool)
			}
			ips[name.NamespacedName][ep.IP] = true
		}
	}
	out := make(map[types.NamespacedName]int, len(ips))
	for nn, set := range ips {
		out[nn] = len(set)
	}
	return out
}

// AddressTypeForFamily is the EndpointSlice address type a proxy of the family reads.
func AddressTypeForFamily(family corev1.IPFamily) discoveryv1.AddressType {
	if family == corev1.IPv6Protocol {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

// SliceService returns the Service an EndpointSlice belongs to (its namespace and the
// kubernetes.io/service-name label), and false when the slice has no such label, which
// kube-proxy ignores.
func SliceService(slice *discoveryv1.EndpointSlice) (types.NamespacedName, bool) {
	name := slice.Labels[discoveryv1.LabelServiceName]
	if name == "" || slice.Namespace == "" || slice.Name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: slice.Namespace, Name: name}, true
}

// endpointsForService merges the slices of one Service (already filtered to the
// family's address type) into per-port endpoint lists, the way kube-proxy's
// EndpointSliceCache does: only addresses[0] of each entry; ports without a name or
// with a zero/unset port number are ignored; entries are keyed by ip:port across
// slices, and a terminating duplicate never replaces an entry already seen. Slices are
// read in name order.
func endpointsForService(nn types.NamespacedName, sliceList []*discoveryv1.EndpointSlice, node *NodeConfig) (EndpointsMap, error) {
	lists, err := portEndpointsForService(nn, sliceList, node)
	if err != nil {
		return nil, err
	}
	out := make(EndpointsMap, len(lists))
	for _, pl := range lists {
		out[pl.name] = pl.eps
	}
	return out, nil
}

// portEndpoints is one service port's endpoint list.
type portEndpoints struct {
	name ServicePortName
	eps  []*Endpoint
}

// portEndpointsForService is endpointsForService as a list (a Service has few ports, so
// a list searched linearly is cheaper than a map); ports without endpoints are left out.
func portEndpointsForService(nn types.NamespacedName, sliceList []*discoveryv1.EndpointSlice, node *NodeConfig) ([]portEndpoints, error) {
	var lists []portEndpoints
	for _, slice := range sliceList {
		for _, port := range slice.Ports {
			if port.Name == nil || port.Port == nil || *port.Port == 0 {
				continue
			}
			proto := corev1.ProtocolTCP
			if port.Protocol != nil {
				proto = protocolOrTCP(*port.Protocol)
			}
			spn := ServicePortName{NamespacedName: nn, Port: *port.Name, Protocol: proto}
			idx := -1
			for i := range lists {
				if lists[i].name == spn {
					idx = i
					break
				}
			}
			if idx < 0 {
				lists = append(lists, portEndpoints{name: spn, eps: make([]*Endpoint, 0, len(slice.Endpoints))})
				idx = len(lists) - 1
			}
			list := lists[idx].eps
			// One allocation for this slice's endpoints of this port.
			slab := make([]Endpoint, 0, len(slice.Endpoints))
			for ei := range slice.Endpoints {
				e := &slice.Endpoints[ei]
				if len(e.Addresses) == 0 {
					continue
				}
				ip, ok := ParseIPSloppy(e.Addresses[0])
				if !ok {
					return nil, fmt.Errorf("endpointslice %s/%s: endpoints[%d].addresses[0]: invalid IP address %q",
						slice.Namespace, slice.Name, ei, e.Addresses[0])
				}
				slab = append(slab, Endpoint{
					IP:          ip,
					Port:        int(*port.Port),
					Ready:       e.Conditions.Ready == nil || *e.Conditions.Ready,
					Serving:     e.Conditions.Serving == nil || *e.Conditions.Serving,
					Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
				})
				ep := &slab[len(slab)-1]
				if e.NodeName != nil {
					ep.NodeName = *e.NodeName
					ep.Local = node.Name != "" && ep.NodeName == node.Name
				}
				if e.Zone != nil {
					ep.Zone = *e.Zone
				}
				if e.Hostname != nil {
					ep.Hostname = *e.Hostname
				}
				if e.Hints != nil {
					for _, z := range e.Hints.ForZones {
						ep.ZoneHints = append(ep.ZoneHints, z.Name)
					}
					if node.NodeHints() {
						for _, n := range e.Hints.ForNodes {
							ep.NodeHints = append(ep.NodeHints, n.Name)
						}
					}
				}
				list = append(list, ep)
			}
			cacheEndpoints(slab)
			lists[idx].eps = list
		}
	}
	out := lists[:0]
	for _, pl := range lists {
		list := pl.eps
		if len(list) == 0 {
			continue
		}
		// Sort stably by ip:port, then keep one entry per ip:port: the first seen,
		// replaced by any later one that is not terminating (an endpoint moving
		// between slices, or a pod IP reused while the old pod terminates).
		slices.SortStableFunc(list, func(a, b *Endpoint) int { return strings.Compare(a.str, b.str) })
		kept := list[:0]
		for _, ep := range list {
			if n := len(kept); n > 0 && kept[n-1].str == ep.str {
				if !ep.Terminating {
					kept[n-1] = ep
				}
				continue
			}
			kept = append(kept, ep)
		}
		out = append(out, portEndpoints{name: pl.name, eps: kept})
	}
	return out, nil
}

func sortEndpoints(list []*Endpoint) {
	slices.SortFunc(list, func(a, b *Endpoint) int {
		switch {
		case a.str < b.str:
			return -1
		case a.str > b.str:
			return 1
		}
		return 0
	})
}

func sortNames(names []ServicePortName) {
	slices.SortFunc(names, func(a, b ServicePortName) int {
		if a.Less(b) {
			return -1
		}
		if b.Less(a) {
			return 1
		}
		return 0
	})
}

// groupSlices filters slices to the family's address type and groups them by Service,
// each group sorted by slice name. Slices without a service-name label are ignored, as
// kube-proxy does; two slices with the same namespace/name are an error.
func groupSlices(sliceList []*discoveryv1.EndpointSlice, family corev1.IPFamily) (map[types.NamespacedName][]*discoveryv1.EndpointSlice, error) {
	want := AddressTypeForFamily(family)
	out := make(map[types.NamespacedName][]*discoveryv1.EndpointSlice)
	seen := make(map[types.NamespacedName]bool, len(sliceList))
	for _, s := range sliceList {
		if s == nil {
			continue
		}
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		if seen[key] {
			return nil, fmt.Errorf("endpointslice %s: listed twice", key)
		}
		seen[key] = true
		if s.AddressType != want {
			continue
		}
		nn, ok := SliceService(s)
		if !ok {
			continue
		}
		out[nn] = append(out[nn], s)
	}
	for _, list := range out {
		sortSlices(list)
	}
	return out, nil
}

// sortSlices sorts one Service's slices by name.
func sortSlices(list []*discoveryv1.EndpointSlice) {
	slices.SortFunc(list, func(a, b *discoveryv1.EndpointSlice) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
}

// BuildEndpointsMap returns the endpoints of every service port found in the slices, for
// the family and the node.
func BuildEndpointsMap(sliceList []*discoveryv1.EndpointSlice, family corev1.IPFamily, node *NodeConfig) (EndpointsMap, error) {
	groups, err := groupSlices(sliceList, family)
	if err != nil {
		return nil, err
	}
	out := make(EndpointsMap, len(groups))
	for nn, list := range groups {
		lists, err := portEndpointsForService(nn, list, node)
		if err != nil {
			return nil, err
		}
		for _, pl := range lists {
			out[pl.name] = pl.eps
		}
	}
	return out, nil
}
