package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

// An IPVS-mode node: the iptables trace ends LOCAL (the ClusterIP is on kube-ipvs0);
// IPVS takes the packet at LOCAL_IN, picks a real server and sends it on, through
// OUTPUT and POSTROUTING. With the node's `ipvsadm -Sn` (--ipvs-save, or a --node
// bundle's) the trace follows it there.

// followIPVS adds to every LOCAL outcome of res the IPVS hop: the virtual service the
// packet meets, the real server its scheduler picks from the dump's state, and the
// forwarded packet's walk. It returns notes for stderr.
func followIPVS(e *emulator.Emulator, res *emulator.WalkResult, in emulator.WalkInput, ipvsData []byte, name string) ([]string, error) {
	m, _, err := ipvsemu.LoadDump(ipvsemu.Config{}, ipvsData, name)
	if err != nil {
		return nil, err
	}
	var notes []string
	met := false
	for _, o := range res.Outcomes {
		if o.Verdict != "LOCAL" {
			continue
		}
		p := in.Packet
		if o.DNATDestination != nil {
			if ap, err := netip.ParseAddrPort(*o.DNATDestination); err == nil {
				p.Dst, p.DstPort = ap.Addr(), ap.Port()
			}
		}
		mark, _ := strconv.ParseUint(strings.TrimPrefix(o.Mark, "0x"), 16, 32)
		dec := m.Schedule(ipvsemu.Packet{Protocol: p.Proto, Src: netip.AddrPortFrom(p.Src, p.SrcPort), Dst: netip.AddrPortFrom(p.Dst, p.DstPort), Mark: uint32(mark)})
		if dec.Service == nil {
			continue // not a virtual service: delivered to a local socket
		}
		vs := dec.Service
		svc := fmt.Sprintf("%s %s %s", vs.Protocol, netip.AddrPortFrom(vs.Address, vs.Port), vs.Scheduler)
		if vs.FWMark != 0 {
			svc = fmt.Sprintf("fwmark %d %s", vs.FWMark, vs.Scheduler)
		}
		met = true
		hop := &emulator.IPVSHop{Service: svc, Reason: dec.Reason}
		o.IPVS = hop
		if dec.Verdict != ipvsemu.VerdictForward || !dec.Dest.IsValid() {
			continue
		}
		hop.RealServer = dec.Dest.String()
		next := in
		next.Packet = p
		next.Packet.Dst, next.Packet.DstPort = dec.Dest.Addr(), dec.Dest.Port()
		next.Packet.Mark = uint32(mark)
		next.Packet.InIface = ""
		next.IPVSLeg, next.Conntrack = true, nil
		r2, err := e.Walk(next)
		if err != nil {
			return notes, err
		}
		hop.Then = r2.Outcomes
	}
	if met {
		notes = append(notes, "IPVS: real servers are picked as the scheduler would from the dump's state ("+name+" has no connection table nor scheduler position: rr starts at its first real server)")
	}
	return notes, nil
}

// ipvsText renders the IPVS hops of the outcomes after the walk's text.
func ipvsText(res *emulator.WalkResult) string {
	var b strings.Builder
	for i, o := range res.Outcomes {
		h := o.IPVS
		if h == nil {
			continue
		}
		fmt.Fprintf(&b, "\noutcome %d: IPVS virtual service %s", i+1, h.Service)
		if h.RealServer == "" {
			fmt.Fprintf(&b, ": %s\n", h.Reason)
			continue
		}
		fmt.Fprintf(&b, " -> real server %s (%s)\n", h.RealServer, h.Reason)
		for j, t := range h.Then {
			fmt.Fprintf(&b, "  then %d. p=%.6f  %s\n", j+1, t.Probability, thenSummary(t))
		}
	}
	return b.String()
}

func thenSummary(o *emulator.Outcome) string {
	s := o.Verdict
	if o.Masqueraded {
		s += " masqueraded"
		if o.SNATSource != nil {
			s += " to " + *o.SNATSource
		}
	}
	if o.Decision != nil {
		if o.Decision.Rule != "" {
			s += fmt.Sprintf(" by %s/%s line %d", o.Decision.Table, o.Decision.Chain, o.Decision.Line)
		} else {
			s += fmt.Sprintf(" by %s/%s policy %s", o.Decision.Table, o.Decision.Chain, o.Decision.Policy)
		}
	}
	return s + " (" + o.Packet + ")"
}
