package hostlink

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
)

// pcapPackets parses a classic pcap file of raw IP packets.
func pcapPackets(t *testing.T, b []byte) []*netsim.Packet {
	t.Helper()
	if len(b) < 24 {
		t.Fatalf("pcap of %d bytes", len(b))
	}
	var out []*netsim.Packet
	for off := 24; off+16 <= len(b); {
		n := int(binary.LittleEndian.Uint32(b[off+8:]))
		pk, err := netsim.ParsePacket(b[off+16 : off+16+n])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pk)
		off += 16 + n
	}
	return out
}

// A real program's connection through the SOCKS5 proxy is captured on the host's link
// (to the ClusterIP) and leaving the node it routes through (DNATed to a pod: out eth0
// or cbr0, wherever the backend is), and traced through the
// node's datapath, as any simulated packet is.
func TestRealTrafficCapturedAndTraced(t *testing.T) {
	live, k := startLive(t, "testdata/web.yaml", "iptables", "")
	c := live.Cluster()
	svc, _ := c.Store().GetService("default", "web")
	vip := netip.MustParseAddr(svc.Spec.ClusterIP)
	var atHost, atNode bytes.Buffer
	stop1, err := c.Capture("external/"+DefaultHostName, &atHost)
	if err != nil {
		t.Fatal(err)
	}
	stop2, err := c.Capture("node-a/eth0", &atNode)
	if err != nil {
		t.Fatal(err)
	}
	var atBridge bytes.Buffer
	stop3, err := c.Capture("node-a/cbr0", &atBridge)
	if err != nil {
		t.Fatal(err)
	}
	ft := c.TraceFlows(netsim.FlowFilter{Proto: netfilter.ProtoTCP, Addr: vip, Port: 80})
	d, _ := proxy.SOCKS5("tcp", k.SOCKSAddr.String(), nil, proxy.Direct)
	hc := &http.Client{Transport: &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext}, Timeout: 30 * time.Second}
	if _, err := httpWhoami(hc, "http://"+vip.String()+"/"); err != nil {
		t.Fatal(err)
	}
	hc.CloseIdleConnections()
	stop1()
	stop2()
	stop3()
	ft.Stop()
	synToVIP := func(pks []*netsim.Packet) bool {
		for _, p := range pks {
			if p.Dst == vip && p.DstPort == 80 {
				return true
			}
		}
		return false
	}
	if !synToVIP(pcapPackets(t, atHost.Bytes())) {
		t.Errorf("no packet to %s:80 captured on external/%s", vip, DefaultHostName)
	}
	toPod := false
	for _, p := range append(pcapPackets(t, atNode.Bytes()), pcapPackets(t, atBridge.Bytes())...) {
		toPod = toPod || p.DstPort == 8080 && strings.HasPrefix(p.Dst.String(), "10.244.")
	}
	if !toPod {
		t.Errorf("no DNATed packet to a pod's :8080 captured on node-a/eth0 or node-a/cbr0")
	}
	trs := ft.Traces()
	if len(trs) == 0 {
		t.Fatal("no traces of the connection")
	}
	if s := trs[0].String(); !strings.Contains(s, "KUBE-SERVICES") || !strings.Contains(s, "DNAT") {
		t.Errorf("the first packet's trace shows no KUBE-SERVICES DNAT:\n%s", s)
	}
}
