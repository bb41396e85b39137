package emulator

import (
	"fmt"
	"net/netip"
	"strings"
)

// The Linux bridge a pod's packet enters the node on (kubenet's cbr0, the bridge CNI
// plugin's cni0), and what it decides that the rules alone cannot: whether a packet a
// Service DNATs back onto the same bridge is delivered. As the kernel does it
// (net/bridge/br_netfilter_hooks.c, net/bridge/br_forward.c; docs/NODE-BUNDLE.md):
//
//	pod ──vethA──▶ cbr0 ──┬─ bridge-nf-call-iptables=1: PREROUTING runs on the bridged
//	                      │  frame; DNATed to an address the node routes out of cbr0
//	                      │  itself ("bridged_dnat"), the frame is bridged again to
//	                      │  the port the new destination's MAC is on: back out vethA
//	                      │  only if vethA has hairpin on (should_deliver), else
//	                      │  dropped before FORWARD; to another port, FORWARD and
//	                      │  POSTROUTING run on the bridged frame.
//	                      └─ bridge-nf-call-iptables=0: iptables never sees a frame
//	                         between two pods; a frame to the gateway's MAC (a Service
//	                         VIP) goes up to the node's IP stack, is DNATed, routed and
//	                         sent by the bridge device itself, which hairpin mode does
//	                         not restrict; the reply of another pod then comes straight
//	                         back over the bridge, not through conntrack.

// Bridge is what a walk knows of the bridge a pod's packet enters on.
type Bridge struct {
	// Name is the bridge device ("cbr0"): the in and out interface iptables sees for
	// a bridged packet. May be empty when not known.
	Name string
	// NFCallIPTables is net.bridge.bridge-nf-call-iptables, or the bridge's own
	// nf_call_iptables: bridged IPv4 frames go through iptables (br_netfilter). Nil:
	// not known (assumed on, as kubeadm's preflight requires; both with AllBranches).
	NFCallIPTables *bool
	// PortOf returns the bridge port the address's MAC is behind ("" when not known).
	PortOf func(netip.Addr) string
	// Hairpin returns a port's hairpin mode; port "" asks for the mode of a port not
	// known by name (the one every port shares, when they do). ok false: not known
	// (assumed on, kubelet's and the bridge CNI plugin's usual setting; both with
	// AllBranches).
	Hairpin func(port string) (on, ok bool)
	// Has says whether an address is on the bridge (the node's route to it leaves by
	// the bridge). Nil: only the packet's own source is known to be.
	Has func(netip.Addr) bool
}

func (b *Bridge) has(a, src netip.Addr) bool {
	if a == src {
		return true
	}
	return b.Has != nil && b.Has(a)
}

func (b *Bridge) portOf(a netip.Addr) string {
	if b.PortOf == nil {
		return ""
	}
	return b.PortOf(a)
}

func (b *Bridge) name() string {
	if b.Name == "" {
		return "the bridge"
	}
	return b.Name
}

// BridgeHop is what the bridge did with a packet whose destination (after DNAT) is on
// the bridge it came in on.
type BridgeHop struct {
	Bridge string `json:"bridge"`
	// InPort and OutPort are the ports the packet came in on and goes out of (when
	// known).
	InPort  string `json:"in_port,omitempty"`
	OutPort string `json:"out_port,omitempty"`
	// Path is "bridged" (the bridge forwards the frame port to port; with
	// br_netfilter iptables sees it at PREROUTING, FORWARD and POSTROUTING, in and
	// out of the bridge device) or "routed" (the node's IP stack routes it and the
	// bridge device sends it).
	Path string `json:"path"`
	// Hairpin is the out port's hairpin mode, when it decided (the packet goes back
	// out the port it came in on); NFCallIPTables the bridge-nf-call-iptables
	// setting the path followed.
	Hairpin        *bool `json:"hairpin,omitempty"`
	NFCallIPTables *bool `json:"bridge_nf_call_iptables"`
	// Reason says why, in words.
	Reason string `json:"reason"`
	// Reply, when set, says why the connection fails even though this packet is
	// delivered: its reply does not come back through the node's conntrack.
	Reply string `json:"reply,omitempty"`
}

func (h *BridgeHop) key() string {
	if h == nil {
		return ""
	}
	return fmt.Sprintf("%s/%s/%s/%s/%v/%v", h.Bridge, h.InPort, h.OutPort, h.Path, fmtOptBool(h.Hairpin), fmtOptBool(h.NFCallIPTables))
}

func fmtOptBool(b *bool) string {
	if b == nil {
		return "?"
	}
	return fmt.Sprint(*b)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// bridgeFor is the bridge a walked packet enters on: a packet from a pod (not from
// outside, not from the node) whose source is on the bridge.
func (in *WalkInput) bridgeFor() *Bridge {
	b := in.Bridge
	if b == nil || in.From == FromExternal || in.From == FromNode || in.IPVSLeg {
		return nil
	}
	if b.Has != nil && !b.Has(in.Packet.Src) {
		return nil
	}
	return b
}

// bridgeSetting resolves a bridge setting: the known value, or, when it is not known,
// an assumption (def on a single path; both values, once a path, with all
// branches), recorded on the outcome like an undecidable match's.
func (c *evalCtx) bridgeSetting(known *bool, cond, label string, def bool) bool {
	if known != nil {
		return *known
	}
	v := def
	if pc, ok := c.ch.(*pathChooser); ok {
		n := len(pc.taken)
		v = pc.unknown(cond, label, false)
		if len(pc.taken) > n { // a new choice: name the branch by the value assumed
			pc.taken[n].Label = fmt.Sprintf("assume %s %s", label, onOff(v))
		}
	}
	c.assume = append(c.assume, Assumption{Hook: c.hook, Match: label, Matched: v, Condition: cond, Holds: v})
	c.tr.add(Step{Kind: StepNote, Detail: fmt.Sprintf("bridge: %s not known: assumed %s", label, onOff(v))}, c)
	return v
}

// bridgeNFCall resolves whether bridged frames go through iptables.
func (c *evalCtx) bridgeNFCall(b *Bridge, hop *BridgeHop) bool {
	v := c.bridgeSetting(b.NFCallIPTables, "bridge "+b.Name+" nf_call_iptables", "bridge-nf-call-iptables ("+b.name()+")", true)
	hop.NFCallIPTables = &v
	return v
}

// bridgeHairpin resolves the hairpin mode of the port a packet would go back out of.
func (c *evalCtx) bridgeHairpin(b *Bridge, port string) bool {
	var known *bool
	if b.Hairpin != nil {
		if on, ok := b.Hairpin(port); ok {
			known = &on
		}
	}
	what := "hairpin mode of " + b.name() + " port " + port
	if port == "" {
		what = "hairpin mode of the pod's port on " + b.name()
	}
	if port == "" {
		port = "(the pod's)"
	}
	return c.bridgeSetting(known, "bridge "+b.Name+" port "+port+" hairpin", what, true)
}

// bridgeUnseen ends the walk of a frame between two pods on the bridge when
// bridged frames do not go through iptables: the bridge delivers it.
func bridgeUnseen(b *Bridge, hop *BridgeHop, dst netip.Addr) {
	hop.Path = "bridged"
	hop.OutPort = b.portOf(dst)
	hop.Reason = fmt.Sprintf("bridge-nf-call-iptables=0: %s is on %s, which forwards the frame port to port; iptables never sees it", dst, b.name())
}

// bridgeAfterDNAT decides the fate of a packet DNATed (or addressed) to an address on
// the bridge it came in on: it returns false when the bridge drops it.
func (c *evalCtx) bridgeAfterDNAT(b *Bridge, hop *BridgeHop, src, dst netip.Addr) bool {
	if !c.bridgeNFCall(b, hop) {
		hop.Path = "routed"
		hop.Reason = fmt.Sprintf("bridge-nf-call-iptables=0: the frame was addressed to the node; the node routes it back out of %s, and the bridge device's own frames are not held to hairpin mode", b.name())
		c.tr.add(Step{Kind: StepNote, Detail: "bridge: " + hop.Reason}, c)
		return true
	}
	hop.Path = "bridged"
	hop.OutPort = b.portOf(dst)
	same := dst == src || hop.InPort != "" && hop.InPort == hop.OutPort
	if !same {
		hop.Reason = fmt.Sprintf("bridged (br_netfilter, bridged_dnat): %s is behind %s, not the port it came in on", dst, portName(hop.OutPort))
		c.tr.add(Step{Kind: StepNote, Detail: "bridge: " + hop.Reason}, c)
		return true
	}
	port := hop.InPort
	if port == "" {
		port = hop.OutPort
	}
	hop.OutPort = port
	on := c.bridgeHairpin(b, port)
	hop.Hairpin = &on
	if on {
		hop.Reason = fmt.Sprintf("bridged (br_netfilter, bridged_dnat) back out %s, the port it came in on: hairpin on", portName(port))
		c.tr.add(Step{Kind: StepNote, Detail: "bridge: " + hop.Reason}, c)
		return true
	}
	hop.Reason = fmt.Sprintf("bridged (br_netfilter, bridged_dnat) back out %s, the port it came in on, whose hairpin mode is off: the bridge does not send a frame back out its input port (br_forward should_deliver); dropped before FORWARD", portName(port))
	c.tr.add(Step{Kind: StepNote, Detail: "bridge: " + hop.Reason}, c)
	return false
}

func portName(p string) string {
	if p == "" {
		return "the pod's port"
	}
	return "port " + p
}

// bridgeReply notes, for a packet the node routed back out of the bridge without
// br_netfilter to another pod and did not masquerade, that the reply bypasses the
// node's conntrack.
func bridgeReply(hop *BridgeHop, client, origDst, dst netip.Addr, masqueraded bool) {
	if hop == nil || hop.Path != "routed" || dst == client || masqueraded {
		return
	}
	hop.Reply = fmt.Sprintf("the reply from %s to %s is bridged straight back, not through the node (bridge-nf-call-iptables=0): conntrack does not undo the DNAT, the client sees it from %s instead of %s and the connection fails", dst, client, dst, origDst)
}

func (h *BridgeHop) summary() string {
	var parts []string
	if h.Hairpin != nil {
		parts = append(parts, fmt.Sprintf("%s %s hairpin %s", h.Bridge, portName(h.OutPort), onOff(*h.Hairpin)))
	}
	if h.NFCallIPTables != nil {
		parts = append(parts, "bridge-nf-call-iptables="+map[bool]string{true: "1", false: "0"}[*h.NFCallIPTables])
	}
	return strings.Join(parts, ", ")
}
