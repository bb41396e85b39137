package conformance

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proptest"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
)

// KernelCases is how many generated cases TestKernelAgrees runs (each builds network
// namespaces and sends a few hundred real connections); -kernel-cases=N runs more.
var kernelCases = flagInt("kernel-cases", 6, "generated cases TestKernelAgrees runs on the real kernel")

// TestKernelAgrees: generated cases run in the simulation under kube-proxy's iptables
// mode and on a real kernel programmed with the same rules (network namespaces that
// mirror the simulated cluster); every kernel connection's outcome (which pod answered,
// the source it saw, refused, dropped) is one the simulation gives. Needs root and
// iptables-nft.
func TestKernelAgrees(t *testing.T) {
	kernel.RequireHarness(t)
	kernel.RequireTools(t, "iptables-nft-restore", "iptables-nft-save")
	setFlag(t, "rapid.checks", *kernelCases)
	setFlag(t, "rapid.shrinktime", "2m")
	rapid.Check(t, func(rt *rapid.T) {
		c := KernelCases(proptest.Options{}).Draw(rt, "case")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		k, err := CompareKernel(ctx, c, KernelOptions{Prefix: "clconf"})
		if err != nil {
			rt.Fatalf("compare with the kernel: %v\ncase: %s", err, c.Summary())
		}
		defer func() {
			if err := k.Close(); err != nil {
				rt.Errorf("harness close: %v", err)
			}
		}()
		t.Log(k.Summary())
		if len(k.Mismatches) > 0 {
			rt.Logf("case: %s", c.Summary())
			for _, m := range k.Mismatches {
				rt.Logf("mismatch: %s", m)
			}
			if data, err := k.World.ScenarioYAML(nil); err == nil {
				rt.Logf("scenario (the case in the simulation; `clusterlab run FILE`):\n%s", data)
			}
			rt.Fatalf("%d flows: the kernel did what the simulation cannot; first: %s", len(k.Mismatches), k.Mismatches[0])
		}
	})
}

// TestKernelCasesHaveTraffic: every case KernelCases draws fits the harness and, built
// in the simulation, has a cluster IP port with endpoints, whose flows the reference
// answers; HasVIPWithEndpoint says no for a case of only headless and ExternalName
// services. Needs no root.
func TestKernelCasesHaveTraffic(t *testing.T) {
	h := newHand(1).service(service.NewService("default/db", service.ExternalName("db.example.com"))).
		service(service.NewService("default/hl", service.Headless(), service.Selector("app=hl"))).
		pod("default/hl-0", "node-a", "hl", "", 8080)
	if HasVIPWithEndpoint(h.c) {
		t.Errorf("a case of a headless and an ExternalName service has no VIP with an endpoint: %s", h.c.Summary())
	}
	setFlag(t, "rapid.checks", 10)
	setFlag(t, "rapid.nofailfile", true)
	rapid.Check(t, func(rt *rapid.T) {
		c := KernelCases(proptest.Options{}).Draw(rt, "case")
		if err := KernelFits(c); err != nil {
			rt.Fatalf("the case does not fit the harness: %v", err)
		}
		w, err := proptest.Build(c, nil)
		if err != nil {
			rt.Fatal(err)
		}
		defer w.Close()
		// Some flow to a cluster IP reaches a pod (answered by it, or refused by it where
		// it does not listen on the port a hand-written slice names).
		for _, f := range Flows(w) {
			if f.Kind != KindClusterIP || !f.View.HasEndpoints() {
				continue
			}
			o, err := observeBranches(w, f)
			if err != nil {
				rt.Fatal(err)
			}
			for _, p := range o.Possible {
				if p.Backend != "" && !strings.HasPrefix(p.Backend, "node:") {
					return
				}
			}
		}
		rt.Fatalf("no connection to a cluster IP reaches a pod: %s", c.Summary())
	})
}

// TestKernelDifferentialNotices: with the kernel's kube-proxy given --masquerade-all and
// the simulation's not, the differential reports the flows whose backends now see a
// node's address.
func TestKernelDifferentialNotices(t *testing.T) {
	kernel.RequireHarness(t)
	kernel.RequireTools(t, "iptables-nft-restore", "iptables-nft-save")
	h := newHand(2).service(service.NewService("default/web", service.Selector("app=web"), service.Port("", 80, 8080))).
		pod("default/web-0", "node-b", "web", "", 8080).pod("default/client", "node-a", "", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k, err := CompareKernel(ctx, h.c, KernelOptions{Prefix: "clconfm", KernelNode: func(nc *proxy.NodeConfig) { nc.MasqueradeAll = true }})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	t.Log(k.Summary())
	found := false
	for _, m := range k.Mismatches {
		t.Logf("mismatch: %s", m)
		if m.Flow.From == "pod:default/client" && m.Flow.Kind == KindClusterIP && m.Kernel.Class == Answered && m.Kernel.Seen == SeenNode {
			found = true
		}
	}
	if !found {
		t.Errorf("the client pod's masqueraded connections to the cluster IP went unnoticed")
	}
	if k.Agreed == 0 {
		t.Errorf("nothing agreed: flows the flag does not change (the cluster IP's other port) must still agree")
	}
}

// TestKernelComparisonModelsTheRunningRelease: the comparison's simulated nodes model
// the release they are compared with: the running kernel's by default (6.1 in
// internal/vmtest's VM, the host's release here), or the one KernelOptions names. No
// root needed: the nodes are set before any namespace is made.
func TestKernelComparisonModelsTheRunningRelease(t *testing.T) {
	rk, err := RunningKernel()
	if err != nil {
		t.Skip(err)
	}
	b, _ := os.ReadFile(osReleasePath)
	if want, _ := netfilter.ParseKernelVersion(string(b)); rk != want || rk.IsZero() {
		t.Fatalf("RunningKernel %v, the release says %q", rk, b)
	}
	h := newHand(2).service(service.NewService("default/web", service.Selector("app=web"), service.Port("", 80, 8080))).
		pod("default/web-0", "node-b", "web", "", 8080)
	w, err := proptest.Build(h.c, Reference.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	v61 := netfilter.MustParseKernelVersion("6.1")
	modelKernel(w, v61)
	for _, n := range w.Cluster.Nodes() {
		if got := n.Settings().Kernel; got != v61 {
			t.Errorf("node %s models Linux %v, want 6.1", n.Name(), got)
		}
	}
}

// TestKernelAgreesIPVS: TestKernelAgrees in kube-proxy's IPVS mode. The simulation runs
// the IPVS mode (the IPVS model in each node's datapath); the kernel's nodes are
// programmed by the same IPVS proxier: kube-ipvs0 with the service addresses, the
// ipsets, the iptables rules around IPVS, real IPVS virtual servers over netlink, and
// the sysctls the mode sets. Every kernel connection's outcome must be one the
// simulation gives. Needs a kernel with IPVS (this CI host's has none: it skips; the
// VM test TestKernelAgreesIPVSVM runs it on Debian's 6.1 kernel in a guest), root,
// iptables-nft and ipset. -kernel-ipvs-cases=N runs more cases.
func TestKernelAgreesIPVS(t *testing.T) {
	kernel.RequireHarness(t)
	kernel.RequireTools(t, "iptables-nft-restore", "iptables-nft-save")
	if err := KernelIPVSSupported(); err != nil {
		t.Skip(err.Error())
	}
	setFlag(t, "rapid.checks", *kernelIPVSCases)
	// rapid's own shrink time (30 s unless -rapid.shrinktime says): a shrink step costs
	// a case (some 20-30 s in the VM's emulated guest), and the boot has a deadline.
	rapid.Check(t, func(rt *rapid.T) {
		c := KernelCases(proptest.Options{}).Draw(rt, "case")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		k, err := CompareKernel(ctx, c, KernelOptions{Prefix: "clconfv", Mode: kubeproxy.IPVS})
		if err != nil {
			rt.Fatalf("compare with the kernel: %v\ncase: %s", err, c.Summary())
		}
		defer func() {
			if err := k.Close(); err != nil {
				rt.Errorf("harness close: %v", err)
			}
		}()
		t.Log(k.Summary())
		checkKernelIPVS(rt, k)
		if len(k.Mismatches) > 0 {
			rt.Logf("case: %s", c.Summary())
			for _, m := range k.Mismatches {
				rt.Logf("mismatch: %s", m)
			}
			if data, err := k.World.ScenarioYAML(nil); err == nil {
				rt.Logf("scenario (the case in the simulation; `clusterlab run --modes ipvs FILE`):\n%s", data)
			}
			rt.Fatalf("%d flows: the kernel's IPVS mode did what the simulation's cannot; first: %s", len(k.Mismatches), k.Mismatches[0])
		}
	})
}

var kernelIPVSCases = flagInt("kernel-ipvs-cases", 4, "generated cases TestKernelAgreesIPVS runs on a kernel with IPVS")

// TestIPVSObservationCoversEveryRealServer: the IPVS world's possible outcomes of a
// flow name every endpoint the kernel's rr may pick, wherever its cursor stands: one
// attempt per real server, and under ClientIP affinity the persistence template let
// expire (in the entry node's IPVS model) between attempts. Needs no root.
func TestIPVSObservationCoversEveryRealServer(t *testing.T) {
	for _, aff := range []int32{0, 10800, 60} {
		svc := service.NewService("default/web", service.Selector("app=web"), service.Port("", 80, 8080))
		if aff > 0 {
			service.ClientIPAffinity(aff)(svc)
		}
		h := newHand(1).service(svc).
			pod("default/web-0", "node-a", "web", "", 8080).pod("default/web-1", "node-a", "web", "", 8080).
			pod("default/web-2", "node-a", "web", "", 8080).pod("default/client", "node-a", "", "")
		m := KubeProxyMode(kubeproxy.IPVS)
		w, err := proptest.Build(h.c, m.Proxy)
		if err != nil {
			t.Fatal(err)
		}
		w.Mode, w.Semantics = m.Name, m.Semantics
		for _, f := range Flows(w) {
			if f.Kind != KindClusterIP || f.From != "pod:default/client" {
				continue
			}
			var o Observation
			if err := observeIPVSAttempts(w, f, &o); err != nil {
				t.Fatal(err)
			}
			for _, b := range []string{"default/web-0", "default/web-1", "default/web-2"} {
				if !o.AnsweredBy(b) {
					t.Errorf("affinity %d: %s is not among the possible outcomes %s", aff, b, o)
				}
			}
			if len(o.Attempts) != 3 {
				t.Errorf("affinity %d: %d attempts, want one per real server (3)", aff, len(o.Attempts))
			}
		}
		w.Close()
	}
}

// checkKernelIPVS: the kernel's nodes really ran the IPVS mode: each has virtual
// servers in its IPVS table (KernelCases always has a cluster IP with an endpoint),
// kube-ipvs0 holding service addresses, and the IPVS sysctls kube-proxy sets in its
// namespace.
func checkKernelIPVS(t interface{ Errorf(string, ...any) }, k *KernelComparison) {
	if k.Harness == nil {
		return
	}
	for i, n := range k.Harness.Nodes {
		v, err := kernel.NewIPVS(n.Netns.Name)
		if err != nil {
			t.Errorf("node %d: %v", i, err)
			continue
		}
		vss, err := v.GetVirtualServers()
		v.Close()
		if err != nil || len(vss) == 0 {
			t.Errorf("node %d: the kernel has %d virtual servers (%v)", i, len(vss), err)
		}
		out, err := k.Harness.Exec(context.Background(), n.Netns, "ip", "-o", "addr", "show", "dev", "kube-ipvs0")
		if err != nil || !strings.Contains(string(out), "inet ") {
			t.Errorf("node %d: kube-ipvs0 holds no address: %q %v", i, out, err)
		}
		for _, key := range []string{"net.ipv4.vs.conntrack", "net.ipv4.vs.expire_nodest_conn", "net.ipv4.vs.expire_quiescent_template"} {
			if v, err := k.Harness.Sysctl(n.Netns, key); err != nil || v != "1" {
				t.Errorf("node %d: %s is %q (%v), want kube-proxy's 1", i, key, v, err)
			}
		}
	}
}

// TestKernelDifferentialNoticesIPVS: TestKernelDifferentialNotices in the IPVS mode:
// with the kernel's kube-proxy given --masquerade-all and the simulation's not, the
// client pod's connections through the kernel's IPVS reach the backend from a node
// address, and the differential says so. Needs a kernel with IPVS (the VM test runs
// it).
func TestKernelDifferentialNoticesIPVS(t *testing.T) {
	kernel.RequireHarness(t)
	kernel.RequireTools(t, "iptables-nft-restore", "iptables-nft-save")
	if err := KernelIPVSSupported(); err != nil {
		t.Skip(err.Error())
	}
	h := newHand(2).service(service.NewService("default/web", service.Selector("app=web"), service.Port("", 80, 8080))).
		pod("default/web-0", "node-b", "web", "", 8080).pod("default/client", "node-a", "", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k, err := CompareKernel(ctx, h.c, KernelOptions{Prefix: "clconfvm", Mode: kubeproxy.IPVS,
		KernelNode: func(nc *proxy.NodeConfig) { nc.MasqueradeAll = true }})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	t.Log(k.Summary())
	checkKernelIPVS(t, k)
	found := false
	for _, m := range k.Mismatches {
		t.Logf("mismatch: %s", m)
		if m.Flow.From == "pod:default/client" && m.Flow.Kind == KindClusterIP && m.Kernel.Class == Answered && m.Kernel.Seen == SeenNode {
			found = true
		}
	}
	if !found {
		t.Errorf("the client pod's masqueraded connections to the cluster IP went unnoticed")
	}
	if k.Agreed == 0 {
		t.Errorf("nothing agreed: flows the flag does not change (the cluster IP's other port) must still agree")
	}
}

// TestIPVSObservationExpiresTemplates: the IPVS world's attempts of every flow of
// generated kernel cases are made afresh under ClientIP affinity: no persistence
// template outlives expireIPVSEntries. A TCP and a UDP port of one number (a
// regression: the UDP flow took the TCP flows' template for its own and could not
// expire it, found with -kernel-ipvs-vm-seed=4242) are held to it by hand too. Needs no
// root.
func TestIPVSObservationExpiresTemplates(t *testing.T) {
	m := KubeProxyMode(kubeproxy.IPVS)
	observeAll := func(t interface {
		Fatal(...any)
		Fatalf(string, ...any)
	}, c *proptest.Case) {
		w, err := proptest.Build(c, m.Proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		w.Mode, w.Semantics = m.Name, m.Semantics
		for _, f := range Flows(w) {
			o, err := observeBranches(w, f)
			if err != nil {
				t.Fatal(err)
			}
			if err := observeIPVSAttempts(w, f, &o); err != nil {
				t.Fatalf("%v\ncase: %s", err, c.Summary())
			}
		}
	}
	svc := service.NewService("default/dns", service.Selector("app=dns"), service.Port("tcp", 53, 53),
		service.ProtocolPort("udp", corev1.ProtocolUDP, 53, 53), service.ClientIPAffinity(10800))
	h := newHand(1).service(svc).pod("default/dns-0", "node-a", "dns", "", 53).pod("default/client", "node-a", "", "")
	observeAll(t, h.c)
	setFlag(t, "rapid.checks", 20)
	setFlag(t, "rapid.nofailfile", true)
	rapid.Check(t, func(rt *rapid.T) {
		observeAll(rt, KernelCases(proptest.Options{}).Draw(rt, "case"))
	})
}
