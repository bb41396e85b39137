package difffuzz

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/kernel"
)

// Kernel is the fuzzers' real network: kernel.Harness's node with the client and two
// server pods, the external host (with the extra address VIP), echo servers on 80 and
// 8080 everywhere.
type Kernel struct {
	H    *kernel.Harness
	Node *kernel.Node
	NS   map[string]*kernel.Netns // by Packet.From
}

// NewKernel builds the topology (backend: the node's iptables backend; nftables: the
// node gets an NFTables adapter and route_localnet stays 0, as kernel.HarnessConfig
// says), checks it is the one this package describes, and closes it when t ends.
func NewKernel(t testing.TB, backend kernel.Backend, nftables bool) *Kernel {
	t.Helper()
	h, err := kernel.NewHarness(kernel.HarnessConfig{Prefix: "clfz", Topology: kernel.TopologyRouted, Backend: backend, NFTables: nftables,
		Pods:          []kernel.PodConfig{{Name: "client"}, {Name: "srv1"}, {Name: "srv2"}},
		PodPorts:      []uint16{80, 8080},
		ExternalAddrs: []netip.Addr{VIP}, ExternalRoutes: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		Timeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("harness close: %v", err)
		}
	})
	// The emulators model no kernel-version difference (docs/VERSIONS.md): the same
	// prediction holds for every release, and the log says which one answered (the
	// host's, or 6.1 in internal/vmtest's TestSecondKernelVM).
	if rel, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		t.Logf("kernel: Linux %s", strings.TrimSpace(string(rel)))
	}
	k := &Kernel{H: h, Node: h.Nodes[0], NS: map[string]*kernel.Netns{"client": h.Pod("client").Netns, "external": h.External, "node": h.Nodes[0].Netns}}
	got := map[string]netip.Addr{"client": h.Pod("client").IP, "srv1": h.Pod("srv1").IP, "srv2": h.Pod("srv2").IP,
		"node": k.Node.IP, "gateway": k.Node.Gateway, "external": h.ExternalIP}
	want := map[string]netip.Addr{"client": Client, "srv1": Srv1, "srv2": Srv2, "node": Node, "gateway": Gateway, "external": Ext}
	for n, a := range want {
		if got[n] != a {
			t.Fatalf("harness: %s is %v, the fuzzer's topology has %v", n, got[n], a)
		}
	}
	for i, p := range []string{"client", "srv1", "srv2"} {
		if v := h.Pod(p).HostVeth; v != "veth"+strconv.Itoa(i) {
			t.Fatalf("harness: %s's veth is %s, the fuzzer's topology has veth%d", p, v, i)
		}
	}
	local, err := h.LocalAddrs(k.Node.Netns)
	if err != nil {
		t.Fatal(err)
	}
	local = slices.DeleteFunc(local, func(a netip.Addr) bool { return !a.Is4() })
	if !slices.Equal(local, NodeLocal) {
		t.Fatalf("harness: the node's addresses are %v, the fuzzer's topology has %v", local, NodeLocal)
	}
	links, err := h.Exec(context.Background(), k.Node.Netns, "ip", "-o", "link", "show", "dev", "eth0")
	if err != nil || !strings.HasPrefix(string(links), "2: eth0") {
		t.Fatalf("harness: the node's eth0 is not ifindex 2 (%q, %v): the masquerade address over lo would differ", links, err)
	}
	for _, port := range []uint16{80, 8080} {
		for _, a := range []netip.Addr{Node, Gateway} {
			if err := h.Serve(k.Node.Netns, "node", netip.AddrPortFrom(a, port)); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range []netip.Addr{Ext, VIP} {
			if err := h.Serve(h.External, "external", netip.AddrPortFrom(a, port)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return k
}

// Send empties the node's conntrack table and sends the packet (the ruleset is
// loaded). A timeout is tried once more when the prediction is not one (an answer late
// on a loaded machine).
func (k *Kernel) Send(ctx context.Context, p Packet, predicted string) (string, error) {
	var obs string
	for try := 0; try < 2; try++ {
		if err := k.Node.Conntrack.Flush(ctx); err != nil {
			return "", err
		}
		obs = Observed(k.H.DialFrom(k.NS[p.From], p.Proto, p.Src, p.Dst))
		if obs != "timeout" || predicted == "timeout" {
			break
		}
	}
	return obs, nil
}

// Observed is what the client saw, in Expect's words.
func Observed(r kernel.Result) string {
	switch r.Outcome {
	case kernel.Answered:
		return "answered " + r.Server + " from " + r.Source.Addr().String()
	case kernel.Refused:
		return "refused"
	case kernel.TimedOut:
		return "timeout"
	case kernel.Unreachable:
		return "unreachable"
	}
	if errors.Is(r.Err, syscall.EPERM) {
		return "eperm"
	}
	var errno syscall.Errno
	if errors.As(r.Err, &errno) {
		return "failed " + errnoName(errno)
	}
	return "failed (" + fmt.Sprint(r.Err) + ")"
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.ENOPROTOOPT:
		return "ENOPROTOOPT"
	case syscall.EINVAL:
		return "EINVAL"
	}
	return fmt.Sprintf("errno %d (%v)", int(e), e)
}
