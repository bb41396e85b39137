package conformance

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/proptest"
	"github.com/clusterlab/clusterlab/proxy"
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
		c := proptest.Cases(proptest.Options{MaxNodes: 2, NoDualStack: true, NoSteps: true}).Draw(rt, "case")
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
			rt.Fatalf("%d flows: the kernel did what the simulation cannot (first: %s)", len(k.Mismatches), k.Mismatches[0].Flow)
		}
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
