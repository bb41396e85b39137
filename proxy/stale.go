package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// IP protocol numbers for ConntrackFilter.Protocol.
const (
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
	ProtoSCTP uint8 = 132
)

func sortStale(st *SyncState) {
	slices.SortFunc(st.DeletedUDPServicePorts, func(a, b *ServicePort) int { return cmpNames(a.Name, b.Name) })
	slices.SortFunc(st.DeletedUDPEndpoints, func(a, b ServiceEndpoint) int {
		if c := cmpNames(a.ServicePortName, b.ServicePortName); c != 0 {
			return c
		}
		return strings.Compare(a.Endpoint, b.Endpoint)
	})
	slices.SortFunc(st.NewlyActiveUDPServices, cmpNames)
}

func cmpNames(a, b ServicePortName) int {
	if a.Less(b) {
		return -1
	}
	if b.Less(a) {
		return 1
	}
	return 0
}

// StaleConntrackFilters returns the UDP conntrack entries kube-proxy clears after a
// successful sync (its conntrack.CleanStaleEntries in the (IP, port) form of 1.29–1.30),
// as the release of s.Node does it (behaviour_selection.go, rows 19-26):
//
//   - for every deleted UDP service port and every UDP service port that just got its
//     first serving endpoint (a client may have created a "black hole" entry while it
//     had none): entries to (cluster IP, port), (each external IP, port) and (each
//     LoadBalancer VIP, port), and entries to its NodePort on any address;
//   - for every UDP endpoint that is gone or no longer serving, of a service port that
//     still exists: entries to its cluster IP, external IPs and LoadBalancer VIPs that
//     were DNATed to the endpoint's IP, and entries to its NodePort DNATed to it.
//
// Before 1.21 the NodePort is not flushed on 0 to N; before 1.32 a node without the
// conntrack binary cleans nothing; 1.32-1.35 (the reconciler, before its fixes) skip
// deleted service ports and service ports left with no serving endpoint.
//
// Filters are deduplicated and in a stable order.
func (s *SyncState) StaleConntrackFilters() []ConntrackFilter {
	era := s.cleanupEra()
	if era.none {
		return nil
	}
	var out []ConntrackFilter
	seen := map[ConntrackFilter]bool{}
	add := func(f ConntrackFilter) {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	var nodePorts []int
	addService := func(sp *ServicePort) {
		port := uint16(sp.Port)
		add(ConntrackFilter{Protocol: ProtoUDP, OrigDst: sp.ClusterIP, OrigDstPort: port})
		for _, ip := range sp.ExternalIPs {
			add(ConntrackFilter{Protocol: ProtoUDP, OrigDst: ip, OrigDstPort: port})
		}
		for _, ip := range sp.LoadBalancerVIPs {
			add(ConntrackFilter{Protocol: ProtoUDP, OrigDst: ip, OrigDstPort: port})
		}
		if sp.Protocol == corev1.ProtocolUDP && sp.NodePort != 0 && era.nodePortFlush {
			nodePorts = append(nodePorts, sp.NodePort)
		}
	}
	for _, sp := range s.DeletedUDPServicePorts {
		if era.skipEmpty {
			continue // the reconciler only walks the services that exist
		}
		addService(sp)
	}
	for _, spn := range s.NewlyActiveUDPServices {
		if sp, ok := s.Services[spn]; ok {
			addService(sp)
		}
	}
	slices.Sort(nodePorts)
	for _, np := range slices.Compact(nodePorts) {
		add(ConntrackFilter{Protocol: ProtoUDP, OrigDstPort: uint16(np)})
	}
	for _, se := range s.DeletedUDPEndpoints {
		sp, ok := s.Services[se.ServicePortName]
		if !ok || (era.skipEmpty && countServing(s.Endpoints[se.ServicePortName]) == 0) {
			continue
		}
		host, _, err := net.SplitHostPort(se.Endpoint)
		if err != nil {
			continue
		}
		epIP, err := netip.ParseAddr(host)
		if err != nil {
			continue
		}
		if sp.NodePort != 0 {
			add(ConntrackFilter{Protocol: ProtoUDP, OrigDstPort: uint16(sp.NodePort), ReplySrc: epIP})
		}
		add(ConntrackFilter{Protocol: ProtoUDP, OrigDst: sp.ClusterIP, ReplySrc: epIP})
		for _, ip := range sp.ExternalIPs {
			add(ConntrackFilter{Protocol: ProtoUDP, OrigDst: ip, ReplySrc: epIP})
		}
		for _, ip := range sp.LoadBalancerVIPs {
			add(ConntrackFilter{Protocol: ProtoUDP, OrigDst: ip, ReplySrc: epIP})
		}
	}
	return out
}

// cleanupEra is how the node's release cleans stale UDP entries.
type cleanupEra struct {
	none          bool // no cleanup at all (the conntrack binary is missing)
	nodePortFlush bool // 0 to N also flushes the NodePort
	skipEmpty     bool // the 1.32-1.35 reconciler: deleted and empty service ports skipped
}

func (s *SyncState) cleanupEra() cleanupEra {
	n := s.Node
	if n == nil {
		n = &NodeConfig{}
	}
	return cleanupEra{
		none:          n.ConntrackBinaryMissing && !n.Has(chConntrackNetlink),
		nodePortFlush: n.Has(chUDPNodePortFlush),
		skipEmpty:     n.Has(chUDPReconciler) && !n.Has(chUDPReconcilerFixes),
	}
}

// CleanStaleConntrack applies the filters through ct and returns how many entries were
// removed. Every filter is tried; the errors are joined.
func CleanStaleConntrack(ct Conntrack, filters []ConntrackFilter) (int, error) {
	if ct == nil {
		return 0, nil
	}
	total := 0
	var errs []error
	for _, f := range filters {
		n, err := ct.Delete(f)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("conntrack delete %s: %w", f, err))
		}
	}
	return total, errors.Join(errs...)
}

// String renders the filter as conntrack -D options.
func (f ConntrackFilter) String() string {
	var b strings.Builder
	b.WriteString("-D")
	switch f.Protocol {
	case 0:
	case ProtoTCP:
		b.WriteString(" -p tcp")
	case ProtoUDP:
		b.WriteString(" -p udp")
	case ProtoSCTP:
		b.WriteString(" -p sctp")
	default:
		fmt.Fprintf(&b, " -p %d", f.Protocol)
	}
	if f.OrigSrc.IsValid() {
		b.WriteString(" --orig-src " + f.OrigSrc.String())
	}
	if f.OrigDst.IsValid() {
		b.WriteString(" --orig-dst " + f.OrigDst.String())
	}
	if f.OrigDstPort != 0 {
		fmt.Fprintf(&b, " --orig-port-dst %d", f.OrigDstPort)
	}
	if f.ReplySrc.IsValid() {
		b.WriteString(" --reply-src " + f.ReplySrc.String())
	}
	if f.ReplySrcPort != 0 {
		fmt.Fprintf(&b, " --reply-port-src %d", f.ReplySrcPort)
	}
	return b.String()
}
