package main

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/service"
)

// Names for a dump's trace from the cluster's manifests (--manifests, a `kubectl get
// -A -o yaml`): the addresses an outcome shows, named as Services, Pods and nodes.

// addrNames maps an address to what it is in the cluster.
type addrNames map[netip.Addr][]string

func (n addrNames) add(s, what string) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return
	}
	a = a.Unmap()
	for _, w := range n[a] {
		if w == what {
			return
		}
	}
	n[a] = append(n[a], what)
}

// loadNames reads the manifests and indexes their addresses.
func loadNames(paths []string) (addrNames, error) {
	ms, err := service.LoadPaths(paths...)
	if err != nil {
		return nil, err
	}
	// The same validation as every command that reads manifests (generate, dns
	// serve, run): names taken from objects the API server would refuse would be
	// names of nothing.
	if err := service.ValidateManifests(ms); err != nil {
		return nil, err
	}
	names := addrNames{}
	for _, m := range ms {
		switch v := m.Object.(type) {
		case *corev1.Service:
			key := "service " + service.NamespaceOrDefault(v.Namespace) + "/" + v.Name
			for _, ip := range append(append([]string{v.Spec.ClusterIP}, v.Spec.ClusterIPs...), v.Spec.ExternalIPs...) {
				names.add(ip, key)
			}
			for _, in := range v.Status.LoadBalancer.Ingress {
				names.add(in.IP, key+" (load balancer)")
			}
		case *corev1.Pod:
			what := "pod " + service.NamespaceOrDefault(v.Namespace) + "/" + v.Name
			if v.Spec.NodeName != "" {
				what += " on " + v.Spec.NodeName
			}
			if v.Spec.HostNetwork {
				continue // the node's address: named by the node
			}
			names.add(v.Status.PodIP, what)
			for _, ip := range v.Status.PodIPs {
				names.add(ip.IP, what)
			}
		case *corev1.Node:
			for _, a := range v.Status.Addresses {
				if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
					names.add(a.Address, "node "+v.Name)
				}
			}
		case *discoveryv1.EndpointSlice:
			for _, e := range v.Endpoints {
				if e.TargetRef == nil || e.TargetRef.Kind != "Pod" {
					continue
				}
				what := "pod " + service.NamespaceOrDefault(v.Namespace) + "/" + e.TargetRef.Name
				if e.NodeName != nil {
					what += " on " + *e.NodeName
				}
				for _, a := range e.Addresses {
					names.add(a, what)
				}
			}
		}
	}
	return names, nil
}

var addrRE = regexp.MustCompile(`[0-9]{1,3}(\.[0-9]{1,3}){3}|[0-9a-fA-F:]*:[0-9a-fA-F:]+`)

// nameOutcomes sets each outcome's Names (and its IPVS hop's outcomes') to the known
// names of the addresses it shows: the packet, the DNAT destination, the SNAT source,
// the real server.
func nameOutcomes(outs []*emulator.Outcome, in emulator.WalkInput, names addrNames) {
	for _, o := range outs {
		texts := []string{in.Packet.Src.String(), in.Packet.Dst.String(), o.Packet}
		if o.DNATDestination != nil {
			texts = append(texts, *o.DNATDestination)
		}
		if o.SNATSource != nil {
			texts = append(texts, *o.SNATSource)
		}
		if o.IPVS != nil {
			texts = append(texts, o.IPVS.RealServer)
			nameOutcomes(o.IPVS.Then, in, names)
		}
		if n := names.of(texts...); n != nil {
			o.Names = n
		}
	}
}

// of names the addresses the texts show that the manifests know; nil when none.
func (names addrNames) of(texts ...string) map[string]string {
	var out map[string]string
	for _, t := range texts {
		for _, s := range addrRE.FindAllString(t, -1) {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			if w := names[a.Unmap()]; len(w) > 0 {
				if out == nil {
					out = map[string]string{}
				}
				out[a.Unmap().String()] = strings.Join(w, "; ")
			}
		}
	}
	return out
}

// namesText lists the names of the outcomes' addresses.
func namesText(outs []*emulator.Outcome) string {
	all := map[string]string{}
	var walk func([]*emulator.Outcome)
	walk = func(os []*emulator.Outcome) {
		for _, o := range os {
			for a, n := range o.Names {
				all[a] = n
			}
			if o.IPVS != nil {
				walk(o.IPVS.Then)
			}
		}
	}
	walk(outs)
	return namesListText(all)
}

// namesListText lists names by address.
func namesListText(all map[string]string) string {
	if len(all) == 0 {
		return ""
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return netip.MustParseAddr(keys[i]).Less(netip.MustParseAddr(keys[j])) })
	var b strings.Builder
	b.WriteString("\nnames (from --manifests):\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-15s %s\n", k, all[k])
	}
	return b.String()
}
