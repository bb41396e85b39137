package kernel

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// newTestHarness builds a harness or skips; it is closed when the test ends, and the
// test checks that every namespace is gone afterwards.
func newTestHarness(t *testing.T, cfg HarnessConfig) *Harness {
	t.Helper()
	RequireHarness(t)
	RequireTools(t, "iptables-nft-restore", "conntrack")
	h, err := NewHarness(cfg)
	if err != nil {
		t.Fatalf("NewHarness: %v", err)
	}
	t.Cleanup(func() {
		names := h.Namespaces()
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, n := range names {
			if _, err := os.Stat(netnsDir + "/" + n.Name); !os.IsNotExist(err) {
				t.Errorf("namespace %s still exists after Close (stat: %v)", n.Name, err)
			}
		}
	})
	return h
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func restore(t *testing.T, ipt *IPTables, text string) {
	t.Helper()
	if err := ipt.Restore(ctxT(t), []byte(text), iptables.RestoreOptions{NoFlush: true}); err != nil {
		t.Fatalf("restore: %v\ninput:\n%s", err, text)
	}
}

func wantAnswer(t *testing.T, what string, r Result, server string, src netip.Addr) {
	t.Helper()
	if r.Outcome != Answered || r.Server != server || (src.IsValid() && r.Source.Addr() != src) {
		t.Errorf("%s: got %v, want %s seeing source %v", what, r, server, src)
	}
}

func wantOutcome(t *testing.T, what string, r Result, o Outcome) {
	t.Helper()
	if r.Outcome != o {
		t.Errorf("%s: got %v, want %v", what, r, o)
	}
}

func TestHarnessPlainConnectivity(t *testing.T) {
	for _, topo := range []Topology{TopologyBridge, TopologyRouted} {
		t.Run(string(topo), func(t *testing.T) {
			h := newTestHarness(t, HarnessConfig{Topology: topo, SecondNode: true,
				Pods: []PodConfig{{Name: "a"}, {Name: "b"}, {Name: "c", Node: 1}}})
			a, b, c := h.Pod("a"), h.Pod("b"), h.Pod("c")
			if got, want := a.IP.String(), "10.244.0.2"; got != want {
				t.Errorf("pod a IP %s, want %s", got, want)
			}
			if got, want := c.IP.String(), "10.244.1.2"; got != want {
				t.Errorf("pod c IP %s, want %s", got, want)
			}
			node := h.Nodes[0]
			for _, proto := range []string{"tcp", "udp"} {
				wantAnswer(t, proto+" pod a -> pod b", h.Dial(a.Netns, proto, netip.AddrPortFrom(b.IP, 8080)), "b", a.IP)
				wantAnswer(t, proto+" pod a -> pod c (other node)", h.Dial(a.Netns, proto, netip.AddrPortFrom(c.IP, 8080)), "c", a.IP)
				wantAnswer(t, proto+" node -> pod a", h.Dial(node.Netns, proto, netip.AddrPortFrom(a.IP, 8080)), "a", node.Gateway)
				wantOutcome(t, proto+" pod a -> pod b closed port", h.Dial(a.Netns, proto, netip.AddrPortFrom(b.IP, 9)), Refused)
			}
			// A host-network server on the node, bound to the node IP.
			if err := h.Serve(node.Netns, "node0-host", netip.AddrPortFrom(node.IP, 10250)); err != nil {
				t.Fatal(err)
			}
			for _, proto := range []string{"tcp", "udp"} {
				wantAnswer(t, proto+" ext -> node IP", h.Dial(h.External, proto, netip.AddrPortFrom(node.IP, 10250)), "node0-host", h.ExternalIP)
				wantAnswer(t, proto+" pod c -> node0 IP (cross node)", h.Dial(c.Netns, proto, netip.AddrPortFrom(node.IP, 10250)), "node0-host", c.IP)
				wantAnswer(t, proto+" pod a from a fixed port", h.DialFrom(a.Netns, proto, netip.AddrPortFrom(a.IP, 40001), netip.AddrPortFrom(b.IP, 8080)), "b", a.IP)
			}
			if r := h.DialFrom(a.Netns, "tcp", netip.AddrPortFrom(a.IP, 40002), netip.AddrPortFrom(b.IP, 8080)); r.Source.Port() != 40002 || r.Local.Port() != 40002 {
				t.Errorf("DialFrom fixed port: %v (local %v), want source port 40002", r, r.Local)
			}
			// The settings a kube-proxy node needs.
			for key, want := range map[string]string{"net.ipv4.ip_forward": "1", "net.ipv4.conf.all.route_localnet": "1", "net.ipv4.conf.all.rp_filter": "0"} {
				if got, err := h.Sysctl(node.Netns, key); err != nil || got != want {
					t.Errorf("node sysctl %s = %q, %v; want %q", key, got, err, want)
				}
			}
			locals, err := h.LocalAddrs(node.Netns)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range locals {
				if a.Is4() {
					got = append(got, a.String())
				}
			}
			if want := "10.244.0.1 127.0.0.1 192.168.77.1"; strings.Join(got, " ") != want {
				t.Errorf("node IPv4 local addresses %v, want %s", got, want)
			}
			out, err := h.Exec(ctxT(t), node.Netns, "ip", "-o", "addr", "show", "dev", "eth0")
			if err != nil || !strings.Contains(string(out), node.IP.String()+"/24") {
				t.Errorf("node eth0 addresses: %q, %v; want %v/24", out, err, node.IP)
			}
		})
	}
}

// Node addresses can be given (to mirror a simulated cluster), and a pod can listen per
// protocol: its TCP port answers TCP only, its UDP port UDP only.
func TestHarnessNodeIPsAndPortsPerProtocol(t *testing.T) {
	h := newTestHarness(t, HarnessConfig{SecondNode: true, NodeNetwork: mustPrefix("172.18.0.0/24"),
		NodeIPs: []netip.Addr{mustAddr("172.18.0.2"), mustAddr("172.18.0.3")},
		Pods:    []PodConfig{{Name: "web", TCPPorts: []uint16{80}, UDPPorts: []uint16{53}}, {Name: "client", Node: 1}}})
	if h.Nodes[0].IP != mustAddr("172.18.0.2") || h.Nodes[1].IP != mustAddr("172.18.0.3") {
		t.Errorf("node IPs %v %v", h.Nodes[0].IP, h.Nodes[1].IP)
	}
	web, client := h.Pod("web"), h.Pod("client")
	wantAnswer(t, "tcp/80", h.Dial(client.Netns, "tcp", netip.AddrPortFrom(web.IP, 80)), "web", client.IP)
	wantAnswer(t, "udp/53", h.Dial(client.Netns, "udp", netip.AddrPortFrom(web.IP, 53)), "web", client.IP)
	wantOutcome(t, "udp/80", h.Dial(client.Netns, "udp", netip.AddrPortFrom(web.IP, 80)), Refused)
	wantOutcome(t, "tcp/53", h.Dial(client.Netns, "tcp", netip.AddrPortFrom(web.IP, 53)), Refused)
	wantOutcome(t, "tcp/8080 (PodPorts do not apply)", h.Dial(client.Netns, "tcp", netip.AddrPortFrom(web.IP, 8080)), Refused)
	wantAnswer(t, "the other pod keeps PodPorts", h.Dial(web.Netns, "tcp", netip.AddrPortFrom(client.IP, 8080)), "client", web.IP)
}

// A build that fails part way removes everything it made.
func TestHarnessCleanupAfterFailure(t *testing.T) {
	RequireHarness(t)
	RequireTools(t, "iptables-nft-restore")
	cases := []struct {
		name string
		cfg  HarnessConfig
		want string
	}{
		{"pod IP outside the node's subnet (fails after namespaces exist)",
			HarnessConfig{Prefix: "clhfail", Pods: []PodConfig{{Name: "a"}, {Name: "b", IP: netip.MustParseAddr("10.9.9.9")}}}, "not a pod address"},
		{"bad node sysctl (fails after links and sysctls)",
			HarnessConfig{Prefix: "clhfail", NodeSysctls: map[string]string{"net.ipv4.no_such_knob": "1"}}, "no_such_knob"},
		{"route clash in the last ip -batch (fails after every link exists)",
			HarnessConfig{Prefix: "clhfail", ExternalRoutes: []netip.Prefix{netip.MustParsePrefix("192.168.77.0/24")}}, "File exists"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHarness(tc.cfg)
			if err == nil {
				h.Close()
				t.Fatalf("NewHarness succeeded, want an error containing %q", tc.want)
			} else if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
			entries, _ := os.ReadDir(netnsDir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), "clhfail") {
					t.Errorf("namespace %s left behind", e.Name())
				}
			}
		})
	}
}

// Do runs in the namespace: a listener opened in pod b's Do accepts a dial made in pod
// a's Do, from a's address; fn's error comes back.
func TestHarnessDo(t *testing.T) {
	h := newTestHarness(t, HarnessConfig{Pods: []PodConfig{{Name: "a"}, {Name: "b"}}, PodPorts: []uint16{}})
	a, b := h.Pod("a"), h.Pod("b")
	var ln net.Listener
	if err := h.Do(b.Netns, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(b.IP, 9000).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(c.RemoteAddr().String()))
			c.Close()
		}
	}()
	var got []byte
	if err := h.Do(a.Netns, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(b.IP, 9000).String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		got, err = io.ReadAll(c)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if host, _, _ := net.SplitHostPort(string(got)); host != a.IP.String() {
		t.Errorf("pod b saw the dial from %q, want pod a's %s", got, a.IP)
	}
	wantErr := errors.New("from fn")
	if err := h.Do(a.Netns, func() error { return wantErr }); err != wantErr {
		t.Errorf("Do returned %v, want fn's error", err)
	}
}
