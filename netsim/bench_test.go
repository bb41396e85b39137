package netsim

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Benchmarks for docs/PERFORMANCE.md. Each simulated figure has its anchor, kernel
// loopback, measured by the Kernel* benchmark in the same run:
//
//	go test -run XXX -bench . -benchtime 3x ./netsim/
//
// The *StaticDNAT benchmarks (named ConnectClusterIP, Probe and ThroughputClusterIP*
// before issue 24) send the VIP through a static DNAT handler, not through any kube-proxy
// mode: they measure the datapath and the stacks, a floor for every mode, not what a user
// runs. proxy/kubeproxy's BenchmarkModes measures the modes themselves (go run
// ./internal/bench).

const chunk = 64 << 10

// sinkServer accepts connections and discards what they send.
func sinkServer(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(io.Discard, c); c.Close() }()
	}
}

// pingServer answers every 64-byte message with 64 bytes and closes.
func pingServer(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			buf := make([]byte, 64)
			if _, err := io.ReadFull(c, buf); err == nil {
				c.Write(buf)
			}
			c.Close()
		}()
	}
}

type dialer interface {
	Dial(network, address string) (net.Conn, error)
}

type kernelDialer struct{}

func (kernelDialer) Dial(network, address string) (net.Conn, error) {
	return net.Dial(network, address)
}

func throughput(b *testing.B, d dialer, addr string, total int) {
	buf := make([]byte, chunk)
	b.SetBytes(int64(total))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		for sent := 0; sent < total; sent += chunk {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		c.(interface{ CloseWrite() error }).CloseWrite()
		io.Copy(io.Discard, c) // wait for the server's close
		c.Close()
	}
}

func connRate(b *testing.B, d dialer, addr string, par int) {
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N / par
	if per == 0 {
		per = 1
	}
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := make([]byte, 64)
			for i := 0; i < per; i++ {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					b.Error(err)
					return
				}
				c.Write(msg)
				io.ReadFull(c, msg)
				c.Close()
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(per*par)/b.Elapsed().Seconds(), "conn/s")
}

// clusterIPPair builds node-a client → VIP (static DNAT) → node-b server.
func clusterIPPair(b *testing.B, mtu int, serve func(net.Listener)) (*Net, string) {
	c, err := New(Config{Seed: 1, MTU: mtu, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	server, err := c.StartPod("node-b", "default", "server", nil, false)
	if err != nil {
		b.Fatal(err)
	}
	client, err := c.StartPod("node-a", "default", "client", nil, false)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := server.Net().Listen("tcp", ":8080")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go serve(ln)
	vip := netip.MustParseAddrPort("10.96.0.1:80")
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{netip.AddrPortFrom(server.IP(), 8080)}})
	return client.Net(), vip.String()
}

func kernelServer(b *testing.B, serve func(net.Listener)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go serve(ln)
	return ln.Addr().String()
}

func BenchmarkThroughputKernelLoopback(b *testing.B) {
	throughput(b, kernelDialer{}, kernelServer(b, sinkServer), 256<<20)
}

func BenchmarkThroughputStaticDNATMTU1500(b *testing.B) {
	n, addr := clusterIPPair(b, 1500, sinkServer)
	throughput(b, n, addr, 64<<20)
}

func BenchmarkThroughputStaticDNATMTU64K(b *testing.B) {
	n, addr := clusterIPPair(b, 65536, sinkServer)
	throughput(b, n, addr, 256<<20)
}

func BenchmarkConnectKernelLoopback(b *testing.B) {
	connRate(b, kernelDialer{}, kernelServer(b, pingServer), 1)
}

func BenchmarkConnectClusterIPStaticDNAT(b *testing.B) {
	n, addr := clusterIPPair(b, 1500, pingServer)
	connRate(b, n, addr, 1)
}

func BenchmarkConnectKernelLoopbackPar16(b *testing.B) {
	connRate(b, kernelDialer{}, kernelServer(b, pingServer), 16)
}

func BenchmarkConnectClusterIPStaticDNATPar16(b *testing.B) {
	n, addr := clusterIPPair(b, 1500, pingServer)
	connRate(b, n, addr, 16)
}

// BenchmarkProbeStaticDNAT measures probes per second through the datapath (client pod
// on node-a, a static DNAT handler, a backend on node-b).
func BenchmarkProbeStaticDNAT(b *testing.B) {
	c, err := New(Config{Seed: 1, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	server, _ := c.StartPod("node-b", "default", "server", nil, false)
	c.StartPod("node-a", "default", "client", nil, false)
	vip := netip.MustParseAddrPort("10.96.0.1:80")
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{netip.AddrPortFrom(server.IP(), 8080)}})
	p := Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: vip}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.SrcPort = uint16(1024 + i%60000)
		if _, err := c.Probe(p); err != nil {
			b.Fatal(err)
		}
		if i%50000 == 49999 {
			c.Clock().Advance(time.Minute) // let conntrack entries expire as they would
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "probes/s")
}

// BenchmarkPods builds 10,000 idle pods and reports the time and heap per pod.
func BenchmarkPods(b *testing.B) {
	const pods = 10000
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		nodes := make([]NodeConfig, 40)
		for j := range nodes {
			nodes[j] = NodeConfig{Name: fmt.Sprintf("node-%02d", j)}
		}
		c, err := New(Config{Seed: 1, Nodes: nodes})
		if err != nil {
			b.Fatal(err)
		}
		prev := runtime.GOMAXPROCS(1)
		for j := 0; j < pods; j++ {
			if _, err := c.StartPod(nodes[j%len(nodes)].Name, "default", fmt.Sprintf("pod-%05d", j), nil, false); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GOMAXPROCS(prev)
		el := time.Since(start)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(el.Seconds(), "s/10k-pods")
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/pods/1024, "KiB-heap/pod")
		b.ReportMetric(float64(after.Sys)/(1<<20), "MiB-sys")
		c.Close()
	}
}

// netstackPair wires two netstacks back to back with no datapath between them: the
// ceiling any simulated path can reach.
func netstackPair(b *testing.B, serve func(net.Listener)) (*Net, string) {
	clock := NewClock(false)
	var a, s *netStack
	var err error
	a, err = newNetStack(stackOptions{name: "a", seed: 1, clock: clock, mtu: 1500, addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/24")}, out: func(f frame) { s.link.inject(f) }})
	if err != nil {
		b.Fatal(err)
	}
	s, err = newNetStack(stackOptions{name: "s", seed: 1, clock: clock, mtu: 1500, addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.2/24")}, out: func(f frame) { a.link.inject(f) }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.close(); s.close() })
	sn := newNet("s", s, []netip.Addr{netip.MustParseAddr("10.0.0.2")})
	ln, err := sn.Listen("tcp", ":8080")
	if err != nil {
		b.Fatal(err)
	}
	go serve(ln)
	return newNet("a", a, []netip.Addr{netip.MustParseAddr("10.0.0.1")}), "10.0.0.2:8080"
}

func BenchmarkConnectNetstackDirect(b *testing.B) {
	n, addr := netstackPair(b, pingServer)
	connRate(b, n, addr, 1)
}

// BenchmarkDatapathHop measures the datapath alone: one op is a TCP ACK of an established
// connection from a pod on node-a through node-a (conntrack, the connection's DNAT,
// routing, FORWARD, POSTROUTING), the cluster network and node-b to the server pod's
// bridge port, and the server's ACK back the same way (four node passes in all). The pods'
// stacks are left out: the packets stop at the bridge ports. Run in replay mode, so that
// the one goroutine of the benchmark does all the work.
func BenchmarkDatapathHop(b *testing.B) {
	c, err := New(Config{Seed: 1, Replay: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	server, _ := c.StartPod("node-b", "default", "server", nil, false)
	client, _ := c.StartPod("node-a", "default", "client", nil, false)
	vip := netip.MustParseAddrPort("10.96.0.1:80")
	backend := netip.AddrPortFrom(server.IP(), 8080)
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{backend}})
	client.dead.Store(true) // packets end at the bridge ports, not in the stacks
	server.dead.Store(true)
	cli := netip.AddrPortFrom(client.IP(), 40000)
	var buf []byte
	// fwd sends a copy of pkt from a pod's veth, as its stack would, and runs every node
	// pass it causes.
	fwd := func(from *Pod, pkt []byte) {
		buf = append(buf[:0], pkt...)
		from.port.toNode(plainFrame(buf))
		for {
			it, ok := c.replayQ.pop()
			if !ok {
				return
			}
			it.n.handleQueued(it.q)
		}
	}
	fwd(client, BuildTCP(TCPSegment{Src: cli, Dst: vip, Flags: netfilter.TCPSyn, Seq: 1000, WindowScale: -1}))
	fwd(server, BuildTCP(TCPSegment{Src: backend, Dst: cli, Flags: netfilter.TCPSyn | netfilter.TCPAck, Seq: 5000, Ack: 1001, WindowScale: -1}))
	ack := BuildTCP(TCPSegment{Src: cli, Dst: vip, Flags: netfilter.TCPAck, Seq: 1001, Ack: 5001, WindowScale: -1})
	reply := BuildTCP(TCPSegment{Src: backend, Dst: cli, Flags: netfilter.TCPAck, Seq: 5001, Ack: 1001, WindowScale: -1})
	fwd(client, ack)
	before := c.Node("node-b").Stats().Forwarded
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fwd(client, ack)
		fwd(server, reply)
	}
	b.StopTimer()
	if got := c.Node("node-b").Stats().Forwarded - before; got != uint64(2*b.N) {
		b.Fatalf("node-b forwarded %d packets, want %d", got, 2*b.N)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(4*b.N), "ns/pass")
}

// BenchmarkDatapathConnection measures the datapath alone for whole connections: one op is
// the ten packets of BenchmarkConnectClusterIPStaticDNAT's connection (handshake, 64 bytes each way,
// both FINs and their ACKs), each from its pod's veth through both nodes to the other pod's
// bridge port (twenty node passes), with a new client port every time, so that conntrack
// creates, NATs and confirms an entry on each node and its table grows as in the
// connection benchmark (20 000 connections, then the clock jumps past TIME_WAIT, untimed,
// and the ports are used again). Replay mode, one goroutine, no stacks: the packets are
// prebuilt.
func BenchmarkDatapathConnection(b *testing.B) {
	c, err := New(Config{Seed: 1, Replay: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	server, _ := c.StartPod("node-b", "default", "server", nil, false)
	client, _ := c.StartPod("node-a", "default", "client", nil, false)
	vip := netip.MustParseAddrPort("10.96.0.1:80")
	backend := netip.AddrPortFrom(server.IP(), 8080)
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{backend}})
	client.dead.Store(true)
	server.dead.Store(true)
	// One connection's packets for each of a range of client ports.
	const ports = 20000
	type pkt struct {
		from *Pod
		b    []byte
	}
	conns := make([][]pkt, ports)
	msg := make([]byte, 64)
	for i := range conns {
		cli := netip.AddrPortFrom(client.IP(), uint16(20000+i))
		const cs, ss = 1000, 5000
		c2s := func(flags uint8, seq, ack uint32, payload []byte) pkt {
			return pkt{client, BuildTCP(TCPSegment{Src: cli, Dst: vip, Flags: flags, Seq: seq, Ack: ack, Window: 65535, Payload: payload, WindowScale: -1})}
		}
		s2c := func(flags uint8, seq, ack uint32, payload []byte) pkt {
			return pkt{server, BuildTCP(TCPSegment{Src: backend, Dst: cli, Flags: flags, Seq: seq, Ack: ack, Window: 65535, Payload: payload, WindowScale: -1})}
		}
		conns[i] = []pkt{
			c2s(netfilter.TCPSyn, cs, 0, nil),
			s2c(netfilter.TCPSyn|netfilter.TCPAck, ss, cs+1, nil),
			c2s(netfilter.TCPAck, cs+1, ss+1, nil),
			c2s(netfilter.TCPPsh|netfilter.TCPAck, cs+1, ss+1, msg),
			s2c(netfilter.TCPAck, ss+1, cs+65, nil),
			s2c(netfilter.TCPPsh|netfilter.TCPAck, ss+1, cs+65, msg),
			s2c(netfilter.TCPFin|netfilter.TCPAck, ss+65, cs+65, nil),
			c2s(netfilter.TCPAck, cs+65, ss+66, nil),
			c2s(netfilter.TCPFin|netfilter.TCPAck, cs+65, ss+66, nil),
			s2c(netfilter.TCPAck, ss+66, cs+66, nil),
		}
	}
	var buf []byte
	na, nb := c.Node("node-a"), c.Node("node-b")
	before := na.Stats().Forwarded + nb.Stats().Forwarded
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 && i%ports == 0 {
			b.StopTimer()
			c.Clock().Advance(3 * time.Minute) // past TIME_WAIT: the ports are free again
			b.StartTimer()
		}
		for _, p := range conns[i%ports] {
			buf = append(buf[:0], p.b...)
			replayPacket(c, p.from, buf)
		}
	}
	b.StopTimer()
	if got := na.Stats().Forwarded + nb.Stats().Forwarded - before; got != uint64(20*b.N) {
		b.Fatalf("the nodes forwarded %d packets, want %d", got, 20*b.N)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(20*b.N), "ns/pass")
}

// replayPacket sends a packet from a pod's veth, as its stack would, and runs every node
// pass it causes (replay mode). Not inlined, so that profilers can single it out.
//
//go:noinline
func replayPacket(c *Network, from *Pod, b []byte) {
	from.port.toNode(plainFrame(b))
	for {
		it, ok := c.replayQ.pop()
		if !ok {
			return
		}
		it.n.handleQueued(it.q)
	}
}
