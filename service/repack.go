package service

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// RepackSubsets returns Endpoints subsets in the canonical layout the API
// server stores (its Endpoints strategy canonicalizes every write) and the
// EndpointSlice mirroring controller reads (kubernetes pkg/api/endpoints
// RepackSubsets):
//
//   - every address appears once per port: addresses are identified by IP
//     and targetRef UID, the first occurrence's fields are kept, and an
//     address listed both ready and not ready for a port is not ready;
//   - ports served by exactly the same addresses (with the same readiness)
//     share one subset, so each port is in exactly one subset;
//   - a subset without ports keeps its addresses in a subset without ports.
//
// Within a subset, addresses are sorted by IP (as strings, then by UID).
// Upstream orders ports and subsets by a hash of their contents; here they
// are sorted by name, port and protocol, and subsets by their first port
// (the port-less subset first) — the same content in a stable order. The
// input is not modified; nil comes back for no addresses at all.
func RepackSubsets(subsets []corev1.EndpointSubset) []corev1.EndpointSubset {
	type addrKey struct {
		ip  string
		uid types.UID
	}
	type portKey struct {
		name, proto, appProto string
		port                  int32
		hasAppProto           bool
	}
	// A port-less subset's addresses are kept under a sentinel port.
	sentinel := portKey{port: -1}

	var addrs []corev1.EndpointAddress // unique addresses, first occurrence wins
	addrIndex := map[addrKey]int{}
	var portOrder []portKey
	portValue := map[portKey]corev1.EndpointPort{}
	readyByPort := map[portKey]map[int]bool{} // port → address index → ready

	keyOf := func(p corev1.EndpointPort) portKey {
		k := portKey{name: p.Name, proto: string(p.Protocol), port: p.Port}
		if p.AppProtocol != nil {
			k.appProto, k.hasAppProto = *p.AppProtocol, true
		}
		return k
	}
	mapAddr := func(a *corev1.EndpointAddress, pk portKey, ready bool) {
		k := addrKey{ip: a.IP}
		if a.TargetRef != nil {
			k.uid = a.TargetRef.UID
		}
		i, ok := addrIndex[k]
		if !ok {
			i = len(addrs)
			addrIndex[k] = i
			addrs = append(addrs, *a.DeepCopy())
		}
		m := readyByPort[pk]
		if m == nil {
			m = map[int]bool{}
			readyByPort[pk] = m
			portOrder = append(portOrder, pk)
		}
		// Not ready wins over ready.
		if was, seen := m[i]; !seen || was {
			m[i] = ready
		}
	}
	for i := range subsets {
		ss := &subsets[i]
		var pks []portKey
		if len(ss.Ports) == 0 {
			pks = []portKey{sentinel}
		}
		for _, p := range ss.Ports {
			pk := keyOf(p)
			if _, ok := portValue[pk]; !ok {
				portValue[pk] = *p.DeepCopy()
			}
			pks = append(pks, pk)
		}
		for _, pk := range pks {
			for j := range ss.Addresses {
				mapAddr(&ss.Addresses[j], pk, true)
			}
			for j := range ss.NotReadyAddresses {
				mapAddr(&ss.NotReadyAddresses[j], pk, false)
			}
		}
	}

	// Group the ports by the exact set of (address, readiness) they have.
	signature := func(m map[int]bool) string {
		idx := make([]int, 0, len(m))
		for i := range m {
			idx = append(idx, i)
		}
		slices.Sort(idx)
		var b strings.Builder
		for _, i := range idx {
			b.WriteString(strconv.Itoa(i))
			if m[i] {
				b.WriteByte('r')
			} else {
				b.WriteByte('n')
			}
			b.WriteByte(',')
		}
		return b.String()
	}
	var groupOrder []string
	groupPorts := map[string][]portKey{}
	for _, pk := range portOrder {
		sig := signature(readyByPort[pk])
		if _, ok := groupPorts[sig]; !ok {
			groupOrder = append(groupOrder, sig)
		}
		groupPorts[sig] = append(groupPorts[sig], pk)
	}

	lessAddr := func(a, b corev1.EndpointAddress) int {
		if c := strings.Compare(a.IP, b.IP); c != 0 {
			return c
		}
		var ua, ub types.UID
		if a.TargetRef != nil {
			ua = a.TargetRef.UID
		}
		if b.TargetRef != nil {
			ub = b.TargetRef.UID
		}
		return cmp.Compare(ua, ub)
	}
	comparePorts := func(a, b corev1.EndpointPort) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol),
			cmp.Compare(derefStr(a.AppProtocol), derefStr(b.AppProtocol)))
	}

	var out []corev1.EndpointSubset
	for _, sig := range groupOrder {
		var ss corev1.EndpointSubset
		m := readyByPort[groupPorts[sig][0]]
		for i, ready := range m {
			if ready {
				ss.Addresses = append(ss.Addresses, addrs[i])
			} else {
				ss.NotReadyAddresses = append(ss.NotReadyAddresses, addrs[i])
			}
		}
		slices.SortFunc(ss.Addresses, lessAddr)
		slices.SortFunc(ss.NotReadyAddresses, lessAddr)
		for _, pk := range groupPorts[sig] {
			if pk != sentinel {
				ss.Ports = append(ss.Ports, portValue[pk])
			}
		}
		slices.SortFunc(ss.Ports, comparePorts)
		out = append(out, ss)
	}
	slices.SortFunc(out, func(a, b corev1.EndpointSubset) int {
		switch {
		case len(a.Ports) == 0 || len(b.Ports) == 0:
			return cmp.Compare(len(a.Ports), len(b.Ports))
		}
		return comparePorts(a.Ports[0], b.Ports[0])
	})
	return out
}
