package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/clusterlab/clusterlab/nodebundle"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The bridge a pod's packet enters the node on: its ports' hairpin modes and
// bridge-nf-call-iptables, from a --node bundle or from --hairpin and
// --bridge-nf-call-iptables (the iptables trace only).

const traceBridgeLong = `

A pod's packet whose destination after DNAT is on the bridge it came in on (kubenet's
cbr0, the bridge CNI plugin's cni0: a pod reaching its own Service) meets the bridge,
which decides what the rules alone cannot, as the kernel does: with
bridge-nf-call-iptables=1 (br_netfilter) the frame is bridged back to the port the new
destination is behind, and back out the port it came in on only when that port has
hairpin mode on; otherwise it is dropped before FORWARD (decided_by "bridge", naming the
port and its mode). With bridge-nf-call-iptables=0 the node routes the packet and the
bridge device sends it (hairpin mode not consulted), but iptables never sees a frame
between two pods, and another pod's reply bypasses conntrack (the outcome says so).
A --node bundle gives the bridge (the source's route), the pod's port (ip-neigh.json,
bridge-fdb.json), each port's hairpin mode (ip-link.json) and the sysctl; --hairpin and
--bridge-nf-call-iptables give them without a bundle (or override it). A setting not
known is an assumption the outcome lists (on; with --all-branches both). The outcome's
"bridge" object: {bridge, in_port, out_port, path ("bridged" or "routed"), hairpin,
bridge_nf_call_iptables, reason, reply}.`

// onOff is a boolean flag taking on or off (or true or false) that stays nil unless
// given.
type onOff struct{ optBool }

func (b *onOff) Type() string { return "on|off" }
func (b *onOff) Set(s string) error {
	switch strings.ToLower(s) {
	case "on":
		s = "true"
	case "off":
		s = "false"
	}
	if err := b.optBool.Set(s); err != nil {
		return fmt.Errorf("want on or off")
	}
	return nil
}
func (b *onOff) String() string {
	if b.p == nil || *b.p == nil {
		return ""
	}
	return map[bool]string{true: "on", false: "off"}[**b.p]
}

// bridgeTraceFlags are the flags of the bridge model.
var bridgeTraceFlags = []string{"hairpin", "bridge-nf-call-iptables"}

func addBridgeTraceFlags(f *pflag.FlagSet, o *traceOptions) {
	f.Var(&onOff{optBool{p: &o.hairpin}}, "hairpin", "the hairpin mode (on or off) of the pod's bridge port (every port's, over a --node bundle's): off drops, as the bridge does, a pod's packet DNATed back to the pod itself when bridge-nf-call-iptables is on; not given: a --node bundle's, else assumed on when it matters")
	f.Var(&optBool{p: &o.brNFCall}, "bridge-nf-call-iptables", "the node's net.bridge.bridge-nf-call-iptables (true or false) for a pod's packet whose destination is on its own bridge (see above); not given: a --node bundle's, else assumed true when it matters")
}

// bridgeModel is the walk's bridge: the --node bundle's with the flags over it, or one
// from the flags alone (named by --in-interface, knowing only that the pod itself is
// on it), or nil.
func (o *traceOptions) bridgeModel() *emulator.Bridge {
	if o.bridge == nil && o.hairpin == nil && o.brNFCall == nil {
		return nil
	}
	b := &emulator.Bridge{Name: o.inIface}
	if o.bridgeFallback != nil {
		b = o.bridgeFallback
	}
	if o.bridge != nil {
		c := *o.bridge
		b = &c
	}
	if o.hairpin != nil {
		on := *o.hairpin
		b.Hairpin = func(string) (bool, bool) { return on, true }
	}
	if o.brNFCall != nil {
		b.NFCallIPTables = o.brNFCall
	}
	return b
}

// useBundleBridge takes the bridge the packet's source is on from the bundle: the
// route to the source leaves by a bridge device (a pod on kubenet's cbr0 or the bridge
// CNI plugin's cni0). It says on stderr what it took and what is not known.
func (o *traceOptions) useBundleBridge(cmd *cobra.Command, b *nodebundle.Bundle, say func(string, ...any)) {
	src, err := netip.ParseAddr(o.src)
	if err != nil || b.Routes == nil {
		return
	}
	src = src.Unmap()
	dev, _ := b.OutIface(src)
	if dev == "" {
		return
	}
	link, ok := b.Link(dev)
	if b.Links == nil {
		say("no interface details (%s: %s): whether %s (the way to %s) is a bridge is not known; the bridge is not modelled unless --hairpin or --bridge-nf-call-iptables is given", nodebundle.IPLink, b.Missing(nodebundle.IPLink), dev, src)
		o.bridgeFallback = &emulator.Bridge{Name: dev, Has: func(a netip.Addr) bool { d, _ := b.OutIface(a.Unmap()); return d == dev },
			PortOf:         func(a netip.Addr) string { p, _ := b.PortOf(dev, a); return p },
			NFCallIPTables: bundleNFCall(b, nodebundle.Link{}, strings.Contains(o.dst, ":"))}
		return
	}
	if !ok || link.Kind != "bridge" {
		return // a routed pod network (CNI ptp, Calico): no bridge between the pods
	}
	br := &emulator.Bridge{Name: dev,
		Has:    func(a netip.Addr) bool { d, _ := b.OutIface(a.Unmap()); return d == dev },
		PortOf: func(a netip.Addr) string { p, _ := b.PortOf(dev, a); return p }}
	modes := map[string]bool{}
	for _, p := range b.Ports(dev) {
		if p.Hairpin != nil {
			modes[p.Name] = *p.Hairpin
		}
	}
	uniform, shared := sharedMode(modes, len(b.Ports(dev)))
	br.Hairpin = func(port string) (bool, bool) {
		if port == "" {
			return uniform, shared
		}
		v, ok := modes[port]
		return v, ok
	}
	br.NFCallIPTables = bundleNFCall(b, link, strings.Contains(o.dst, ":"))
	o.bridge = br

	port, why := b.PortOf(dev, src)
	mode := "hairpin mode not known"
	if v, ok := br.Hairpin(port); ok && port != "" {
		mode = "hairpin " + map[bool]string{true: "on", false: "off"}[v]
	}
	if port != "" {
		say("%s is on bridge %s behind port %s (%s)", src, dev, port, mode)
	} else {
		all := "and the ports' hairpin modes differ: assumed on where it matters"
		if shared {
			all = fmt.Sprintf("every port of %s has hairpin %s", dev, map[bool]string{true: "on", false: "off"}[uniform])
		}
		say("%s is on bridge %s, its port not known (%s); %s", src, dev, why, all)
	}
	key := nfCallKey(strings.Contains(o.dst, ":"))
	switch {
	case cmd.Flags().Changed("bridge-nf-call-iptables"):
	case br.NFCallIPTables == nil:
		say("%s not collected (%s): assumed 1 where it matters", key, nodebundle.Sysctl)
	default:
		val := b.Sysctls[key]
		if b.AbsentSysctls[key] {
			val = "absent (br_netfilter not loaded)"
		}
		say("%s = %s, %s's own nf_call_iptables %s: %s's frames %s iptables", key, val, dev, optText(link.NFCallIPTables), dev, map[bool]string{true: "go through", false: "bypass"}[*br.NFCallIPTables])
	}
}

// sharedMode is the hairpin mode every one of n ports has, if they all say the same.
func sharedMode(modes map[string]bool, n int) (bool, bool) {
	if len(modes) == 0 || len(modes) != n {
		return false, false
	}
	first, v := true, false
	for _, m := range modes {
		if first {
			v, first = m, false
		} else if m != v {
			return false, false
		}
	}
	return v, true
}

func nfCallKey(ipv6 bool) string {
	if ipv6 {
		return "net.bridge.bridge-nf-call-ip6tables"
	}
	return "net.bridge.bridge-nf-call-iptables"
}

// bundleNFCall is whether the bridge's frames go through iptables (br_nf_pre_routing:
// the sysctl or the bridge's own option): nil when not known.
func bundleNFCall(b *nodebundle.Bundle, bridge nodebundle.Link, ipv6 bool) *bool {
	key := nfCallKey(ipv6)
	t, f := true, false
	if b.AbsentSysctls[key] {
		return &f // no br_netfilter: no hooks at all, whatever the bridge's option says
	}
	v, ok := b.Sysctls[key]
	switch {
	case ok && v == "1", ok && bridge.NFCallIPTables != nil && *bridge.NFCallIPTables:
		return &t
	case ok && v == "0":
		if bridge.NFCallIPTables == nil {
			return nil
		}
		return &f
	}
	return nil
}

func optText(b *bool) string {
	if b == nil {
		return "not known"
	}
	return map[bool]string{true: "1", false: "0"}[*b]
}
