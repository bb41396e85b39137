package emulator

import (
	"fmt"
	"io"
)

// Traffic statistics, as ipvsadm -Ln --stats shows them: per virtual service and per
// real server, the connections scheduled and the packets and bytes IPVS passed in each
// direction. The kernel counts them in ip_vs_conn_stats (a connection entry made by the
// scheduler or a persistence template: not the template itself), ip_vs_in_stats (every
// packet from a client that finds or makes an entry, before its state moves) and
// ip_vs_out_stats (every reply of a masqueraded entry); a packet counts only while its
// entry's real server is in its service (AVAILABLE), and bytes are the IP packet's
// length (skb->len at the hook). The model counts the same events; a packet's length is
// Packet.Len.
//
// A conn line of a script plays packets without payload for TCP (the handshake and the
// close, not a real stack's data segments, acknowledgements and their timing), so a
// TCP service's packet and byte counts are the model's segments, not a real client's;
// its connection counts are exact. A UDP conn line is what the VM agent really sends:
// one request of ConnPayload bytes and one reply of ConnPayload bytes, so its packet
// and byte counts are a real exchange's too.
//
// Readers beware of one kernel property the model does not have: Linux shows the
// counters as its rate estimator last summed them from the per-CPU counters, every 2
// seconds (estimation_timer; a kthread since 6.2), so a listing taken right after
// traffic can lag it. The VM differential waits 3 s before it lists them.

// ConnPayload is the size in bytes of the request and of the reply a conn line stands
// for: the VM agent's client sends this many bytes and its real server answers with as
// many, so the kernel's byte counters are fixed by the script. UDP conn lines give their
// packets IP lengths of 28+ConnPayload (IPv4) or 48+ConnPayload (IPv6).
const ConnPayload = 64

// TrafficStats are one object's counters.
type TrafficStats struct {
	Conns    uint64 `json:"conns"`
	InPkts   uint64 `json:"inpkts"`
	OutPkts  uint64 `json:"outpkts"`
	InBytes  uint64 `json:"inbytes"`
	OutBytes uint64 `json:"outbytes"`
}

// ServiceStats is a virtual service's counters and its real servers', in kernel list
// order. Service is labelled as in the script report ("TCP 10.96.0.1:80", "FWM 1").
type ServiceStats struct {
	Service      string       `json:"service"`
	Stats        TrafficStats `json:"stats"`
	Destinations []DestStats  `json:"destinations"`
}

// DestStats is a real server's counters.
type DestStats struct {
	Destination string       `json:"destination"`
	Stats       TrafficStats `json:"stats"`
}

// Traffic returns the traffic statistics of every virtual service (in ipvsadm's order),
// what ipvsadm -Ln --stats lists.
func (m *Model) Traffic() []ServiceStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	out := []ServiceStats{}
	for _, s := range m.sortedServices() {
		ss := ServiceStats{Service: serviceLabel(s.virtualServer()), Stats: s.traffic, Destinations: []DestStats{}}
		for _, d := range s.dests {
			ss.Destinations = append(ss.Destinations, DestStats{Destination: fmtAddrPort(d.addr, d.port), Stats: d.traffic})
		}
		out = append(out, ss)
	}
	return out
}

// countConn is ip_vs_conn_stats(): a new (non-template) entry scheduled to d by svc.
func countConn(svc *service, d *dest) {
	d.traffic.Conns++
	svc.traffic.Conns++
}

// countPacket is ip_vs_in_stats (out false) and ip_vs_out_stats (out true).
func countPacket(c *conn, p *Packet, out bool) {
	d := c.dest
	if d == nil || !d.available || d.svc == nil {
		return
	}
	n := uint64(max(p.Len, 0))
	for _, t := range []*TrafficStats{&d.traffic, &d.svc.traffic} {
		if out {
			t.OutPkts++
			t.OutBytes += n
		} else {
			t.InPkts++
			t.InBytes += n
		}
	}
}

// zeroStats is ipvsadm -Z: every service's counters (or one service's) and its real
// servers'.
func zeroStats(svcs []*service) {
	for _, s := range svcs {
		s.traffic = TrafficStats{}
		for _, d := range s.dests {
			d.traffic = TrafficStats{}
		}
	}
}

// writeStats is ipvsadm -Ln --stats (print_service_entry with FMT_STATS).
func writeStatsTitle(w io.Writer) {
	fmt.Fprintf(w, "%-33s %8s %8s %8s %8s %8s\n  -> RemoteAddress:Port\n",
		"Prot LocalAddress:Port", "Conns", "InPkts", "OutPkts", "InBytes", "OutBytes")
}

func writeStatsLine(w io.Writer, name string, t TrafficStats, exact bool) {
	fmt.Fprint(w, name)
	for _, v := range []uint64{t.Conns, t.InPkts, t.OutPkts, t.InBytes, t.OutBytes} {
		fmt.Fprint(w, largeNum(v, exact))
	}
	fmt.Fprintln(w)
}

// largeNum is ipvsadm's print_largenum().
func largeNum(i uint64, exact bool) string {
	if exact {
		s := fmt.Sprint(i)
		return fmt.Sprintf("%*d", max(9, len(s)+1), i)
	}
	switch {
	case i < 100000000:
		return fmt.Sprintf("%9d", i)
	case i < 1000000000:
		return fmt.Sprintf("%8dK", i/1000)
	case i < 1000000000000:
		return fmt.Sprintf("%8dM", i/1000000)
	case i < 1000000000000000:
		return fmt.Sprintf("%8dG", i/1000000000)
	}
	return fmt.Sprintf("%8dT", i/1000000000000)
}
