package dns

import (
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// builtinNamespaces always exist in a Kubernetes cluster, whether or not the
// Source lists them.
var builtinNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// The Service whose cluster IPs the NS glue (ns.dns.<zone>) points at.
const (
	dnsServiceNamespace = "kube-system"
	dnsServiceName      = "kube-dns"
)

type svcKind int

const (
	kindClusterIP svcKind = iota
	kindHeadless
	kindExternalName
)

// noPort is the port of an endpoint whose slice lists no ports (a portless
// headless service): it yields address records but never an SRV record.
const noPort = -1

type portInfo struct {
	name     string // lower case
	protocol string // lower case: tcp, udp, sctp
	port     int32
}

// endpointAddr is one ready address of a service's endpoints.
type endpointAddr struct {
	label string // the DNS label: hostname, pod name or dashed IP (lower case)
	addr  netip.Addr
	ports []portInfo // from the endpoint's slice; [{port: noPort}] when it has none
	// fqdn is label.<service's fqdn>: the endpoint's name in the cluster domain as a
	// query spelled in lower case gets it (see svcRecord.fqdn).
	fqdn string
}

// svcRecord is what the index keeps of one Service.
type svcRecord struct {
	name, namespace string // as in the object
	kind            svcKind
	clusterIPs      []netip.Addr
	ports           []portInfo
	// externalName is the ExternalName target as an FQDN, or "" when the
	// service has none we can serve (empty, or shaped like an IP address).
	externalName string
	endpoints    []endpointAddr
	// fqdn is name.namespace.svc.<cluster domain>, the name the lookup gives the
	// service's records when the query spells the zone as the cluster domain (lower
	// case): built once here rather than per query.
	fqdn string
}

// index is an immutable snapshot of the Source, shaped for lookups. A new one
// is built on every change; queries read the current one without locking.
type index struct {
	serial     uint32
	synced     bool
	namespaces map[string]struct{}
	services   map[string]*svcRecord // key: lower(namespace) + "/" + lower(name)
	// ptrs maps an IP to the names that point back at it, FQDNs in the
	// primary zone ("svc.ns.svc.<zone>" or "host.svc.ns.svc.<zone>"); a
	// cluster IP match replaces endpoint matches, as in CoreDNS.
	ptrs    map[netip.Addr][]string
	podNS   map[netip.Addr][]string // pod IP → lower-case namespaces of pods with it
	nsAddrs []netip.Addr
	replies replyCache // packed replies answered from this index (ServeDNS)
}

func svcKey(namespace, name string) string {
	return strings.ToLower(namespace) + "/" + strings.ToLower(name)
}

// buildIndex snapshots src. primary is the cluster domain (lower-case FQDN);
// endpointPodNames selects CoreDNS's endpoint_pod_names behaviour (pod name as
// the endpoint label when the endpoint has no hostname).
func buildIndex(src Source, primary string, endpointPodNames bool, fallbackNS []netip.Addr) *index {
	idx := &index{
		synced:     true,
		namespaces: map[string]struct{}{},
		services:   map[string]*svcRecord{},
		ptrs:       map[netip.Addr][]string{},
		podNS:      map[netip.Addr][]string{},
	}
	if sr, ok := src.(SyncReporter); ok {
		idx.synced = sr.HasSynced()
	}
	for _, ns := range builtinNamespaces {
		idx.namespaces[ns] = struct{}{}
	}
	for _, ns := range src.ListNamespaces() {
		if ns != nil && ns.Name != "" {
			idx.namespaces[strings.ToLower(ns.Name)] = struct{}{}
		}
	}

	svcs := src.ListServices()
	sort.Slice(svcs, func(i, j int) bool {
		if svcs[i].Namespace != svcs[j].Namespace {
			return svcs[i].Namespace < svcs[j].Namespace
		}
		return svcs[i].Name < svcs[j].Name
	})
	var ordered []*svcRecord
	for _, svc := range svcs {
		if svc == nil || svc.Name == "" {
			continue
		}
		rec := newSvcRecord(svc)
		key := svcKey(rec.namespace, rec.name)
		if _, dup := idx.services[key]; dup {
			continue
		}
		idx.services[key] = rec
		ordered = append(ordered, rec)
		idx.namespaces[strings.ToLower(rec.namespace)] = struct{}{}
	}

	// Endpoints: EndpointSlices first; v1 Endpoints only for services with no slice.
	hasSlice := map[string]bool{}
	for _, sl := range src.ListEndpointSlices() {
		if sl == nil {
			continue
		}
		idx.namespaces[strings.ToLower(sl.Namespace)] = struct{}{}
		svcName := sl.Labels[discoveryv1.LabelServiceName]
		if svcName == "" {
			continue
		}
		key := svcKey(sl.Namespace, svcName)
		hasSlice[key] = true
		rec := idx.services[key]
		if rec == nil {
			continue
		}
		rec.endpoints = append(rec.endpoints, sliceEndpoints(sl, endpointPodNames)...)
	}
	if el, ok := src.(EndpointsLister); ok {
		for _, ep := range el.ListEndpoints() {
			if ep == nil {
				continue
			}
			idx.namespaces[strings.ToLower(ep.Namespace)] = struct{}{}
			key := svcKey(ep.Namespace, ep.Name)
			if hasSlice[key] {
				continue
			}
			if rec := idx.services[key]; rec != nil {
				rec.endpoints = append(rec.endpoints, v1Endpoints(ep, endpointPodNames)...)
			}
		}
	}

	for _, rec := range ordered {
		rec.setFQDNs(primary)
	}

	// Reverse records: cluster IPs first (first service in namespace/name
	// order wins), then ready endpoint addresses for IPs that are no cluster IP.
	clusterIP := map[netip.Addr]bool{}
	for _, rec := range ordered {
		if rec.kind != kindClusterIP {
			continue
		}
		for _, ip := range rec.clusterIPs {
			if clusterIP[ip] {
				continue
			}
			clusterIP[ip] = true
			idx.ptrs[ip] = []string{strings.ToLower(rec.fqdn)} // rec.fqdn itself when lower case, as Kubernetes names are
		}
	}
	for _, rec := range ordered {
		lower := strings.ToLower(rec.fqdn)
		for _, ep := range rec.endpoints {
			if clusterIP[ep.addr] {
				continue
			}
			name := ep.fqdn // label.<rec.fqdn>, the label lower case already
			if lower != rec.fqdn {
				name = ep.label + "." + lower
			}
			if !containsString(idx.ptrs[ep.addr], name) {
				idx.ptrs[ep.addr] = append(idx.ptrs[ep.addr], name)
			}
		}
	}

	for _, pod := range src.ListPods() {
		if pod == nil {
			continue
		}
		ns := strings.ToLower(pod.Namespace)
		idx.namespaces[ns] = struct{}{}
		for _, ip := range podIPs(pod) {
			if !containsString(idx.podNS[ip], ns) {
				idx.podNS[ip] = append(idx.podNS[ip], ns)
			}
		}
	}

	if rec := idx.services[svcKey(dnsServiceNamespace, dnsServiceName)]; rec != nil && len(rec.clusterIPs) > 0 {
		idx.nsAddrs = rec.clusterIPs
	} else {
		idx.nsAddrs = fallbackNS
	}
	return idx
}

// setFQDNs sets the names of the service and of its endpoints in the cluster domain
// primary (see svcRecord.fqdn), all in one string.
func (rec *svcRecord) setFQDNs(primary string) {
	svcLen := len(rec.name) + 1 + len(rec.namespace) + len(".svc.") + len(primary)
	n := svcLen
	for i := range rec.endpoints {
		n += len(rec.endpoints[i].label) + 1 + svcLen
	}
	var b strings.Builder
	b.Grow(n)
	for i := -1; i < len(rec.endpoints); i++ {
		if i >= 0 {
			b.WriteString(rec.endpoints[i].label)
			b.WriteByte('.')
		}
		b.WriteString(rec.name)
		b.WriteByte('.')
		b.WriteString(rec.namespace)
		b.WriteString(".svc.")
		b.WriteString(primary)
	}
	all := b.String()
	rec.fqdn = all[:svcLen]
	off := svcLen
	for i := range rec.endpoints {
		end := off + len(rec.endpoints[i].label) + 1 + svcLen
		rec.endpoints[i].fqdn = all[off:end]
		off = end
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func newSvcRecord(svc *corev1.Service) *svcRecord {
	rec := &svcRecord{name: svc.Name, namespace: svc.Namespace}
	for _, p := range svc.Spec.Ports {
		proto := string(p.Protocol)
		if proto == "" {
			proto = string(corev1.ProtocolTCP)
		}
		rec.ports = append(rec.ports, portInfo{name: strings.ToLower(p.Name), protocol: strings.ToLower(proto), port: p.Port})
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		rec.kind = kindExternalName
		target := strings.TrimSuffix(svc.Spec.ExternalName, ".")
		if _, err := netip.ParseAddr(target); err != nil && target != "" {
			rec.externalName = target + "."
		}
		return rec
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if s == corev1.ClusterIPNone {
			rec.kind = kindHeadless
			rec.clusterIPs = nil
			break
		}
		if ip, err := netip.ParseAddr(s); err == nil {
			rec.clusterIPs = append(rec.clusterIPs, ip.Unmap())
		}
	}
	return rec
}

// endpointLabel is the name an endpoint gets under its service: its hostname,
// else (with endpoint_pod_names) its pod's name, else its IP with '.' or ':'
// replaced by '-'.
func endpointLabel(hostname, podName string, ip netip.Addr, podNames bool) string {
	switch {
	case hostname != "":
		return strings.ToLower(hostname)
	case podNames && podName != "":
		return strings.ToLower(podName)
	case ip.Is4():
		return strings.ReplaceAll(ip.String(), ".", "-")
	default:
		return strings.ReplaceAll(ip.String(), ":", "-")
	}
}

func sliceEndpoints(sl *discoveryv1.EndpointSlice, podNames bool) []endpointAddr {
	if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
		return nil
	}
	var ports []portInfo
	for _, p := range sl.Ports {
		pi := portInfo{protocol: "tcp", port: noPort}
		if p.Name != nil {
			pi.name = strings.ToLower(*p.Name)
		}
		if p.Protocol != nil && *p.Protocol != "" {
			pi.protocol = strings.ToLower(string(*p.Protocol))
		}
		if p.Port != nil {
			pi.port = *p.Port
		}
		ports = append(ports, pi)
	}
	if len(ports) == 0 {
		ports = []portInfo{{port: noPort}}
	}
	var out []endpointAddr
	for _, e := range sl.Endpoints {
		if e.Conditions.Ready != nil && !*e.Conditions.Ready {
			continue
		}
		host, pod := "", ""
		if e.Hostname != nil {
			host = *e.Hostname
		}
		if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
			pod = e.TargetRef.Name
		}
		for _, a := range e.Addresses {
			ip, err := netip.ParseAddr(a)
			if err != nil {
				continue
			}
			ip = ip.Unmap()
			out = append(out, endpointAddr{label: endpointLabel(host, pod, ip, podNames), addr: ip, ports: ports})
		}
	}
	return out
}

func v1Endpoints(ep *corev1.Endpoints, podNames bool) []endpointAddr {
	var out []endpointAddr
	for _, ss := range ep.Subsets {
		var ports []portInfo
		for _, p := range ss.Ports {
			proto := string(p.Protocol)
			if proto == "" {
				proto = "tcp"
			}
			ports = append(ports, portInfo{name: strings.ToLower(p.Name), protocol: strings.ToLower(proto), port: p.Port})
		}
		if len(ports) == 0 {
			ports = []portInfo{{port: noPort}}
		}
		for _, a := range ss.Addresses {
			ip, err := netip.ParseAddr(a.IP)
			if err != nil {
				continue
			}
			ip = ip.Unmap()
			pod := ""
			if a.TargetRef != nil && a.TargetRef.Kind == "Pod" {
				pod = a.TargetRef.Name
			}
			out = append(out, endpointAddr{label: endpointLabel(a.Hostname, pod, ip, podNames), addr: ip, ports: ports})
		}
	}
	return out
}

func podIPs(pod *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if ip, err := netip.ParseAddr(s); err == nil {
			ip = ip.Unmap()
			for _, x := range out {
				if x == ip {
					return
				}
			}
			out = append(out, ip)
		}
	}
	add(pod.Status.PodIP)
	for _, p := range pod.Status.PodIPs {
		add(p.IP)
	}
	return out
}
