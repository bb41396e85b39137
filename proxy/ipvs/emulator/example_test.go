package emulator_test

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	"github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

// A kube-proxy-style program and the packets of one connection.
func ExampleModel_In() {
	clock := emulator.NewManualClock()
	m := emulator.MustNew(emulator.Config{Clock: clock})
	vs := &ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: "TCP", Port: 80, Scheduler: "rr"}
	_ = m.AddVirtualServer(vs)
	for _, ep := range []string{"10.244.1.5", "10.244.2.5"} {
		_ = m.AddRealServer(vs, &ipvs.RealServer{Address: netip.MustParseAddr(ep), Port: 8080, Weight: 1})
	}
	client := netip.MustParseAddrPort("10.244.3.7:40000")
	syn := m.In(emulator.Packet{Protocol: netfilter.ProtoTCP, Src: client, Dst: netip.MustParseAddrPort("10.96.0.10:80"), TCPFlags: netfilter.TCPSyn})
	fmt.Println(syn.Verdict, syn.Dest, syn.Via, syn.Conn.State)
	synack := m.Out(emulator.Packet{Protocol: netfilter.ProtoTCP, Src: syn.Dest, Dst: client, TCPFlags: netfilter.TCPSyn | netfilter.TCPAck})
	fmt.Println("reply source becomes", synack.Dest)
	ack := m.In(emulator.Packet{Protocol: netfilter.ProtoTCP, Src: client, Dst: netip.MustParseAddrPort("10.96.0.10:80"), TCPFlags: netfilter.TCPAck})
	fmt.Println(ack.Via, ack.Conn.State, ack.Conn.Expires)
	clock.Advance(15 * time.Minute)
	fmt.Println(len(m.Connections()), "entries after 15 minutes of silence")
	// Output:
	// forward 10.244.2.5:8080 scheduler SYN_RECV
	// reply source becomes 10.96.0.10:80
	// connection ESTABLISHED 15m0s
	// 0 entries after 15 minutes of silence
}

// The ipvsadm face and a script, as clusterlab ipvs runs them. The service was created
// empty and filled one destination at a time, so wrr's current weight is still the 1 of
// its first add: the first round takes every server, the most recently added first.
func ExampleRunScript() {
	rep, err := emulator.RunScript(emulator.ScriptInput{ScriptName: "example", Script: []byte(`
-A -t 10.96.0.10:80 -s wrr
-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 2
-a -t 10.96.0.10:80 -r 10.244.2.5:8080 -m -w 1
conn tcp 10.244.3.7:40000 10.96.0.10:80
conn tcp 10.244.3.7:40001 10.96.0.10:80
sched tcp 10.244.3.7:40002 10.96.0.10:80
-Sn
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = rep.WriteText(os.Stdout)
	// Output:
	// conn tcp 10.244.3.7:40000 -> 10.96.0.10:80: 10.244.2.5:8080 [TCP 10.96.0.10:80 wrr, new connection via scheduler, ESTABLISHED]
	// conn tcp 10.244.3.7:40001 -> 10.96.0.10:80: 10.244.1.5:8080 [TCP 10.96.0.10:80 wrr, new connection via scheduler, ESTABLISHED]
	// sched tcp 10.244.3.7:40002 -> 10.96.0.10:80: 10.244.1.5:8080 [TCP 10.96.0.10:80 wrr, via scheduler]
	// -Sn
	// -A -t 10.96.0.10:80 -s wrr
	// -a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 2
	// -a -t 10.96.0.10:80 -r 10.244.2.5:8080 -m -w 1
}
