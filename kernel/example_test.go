package kernel_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// A differential test's skeleton: program the node's real iptables, send real traffic,
// look at who answered. (In a test, call kernel.RequireHarness(t) first.)
func ExampleNewHarness() {
	h, err := kernel.NewHarness(kernel.HarnessConfig{
		Pods: []kernel.PodConfig{{Name: "web-1"}, {Name: "web-2"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()

	ctx := context.Background()
	web1 := h.Pod("web-1")
	rules := fmt.Sprintf("*nat\n-A PREROUTING -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination %s:8080\nCOMMIT\n", web1.IP)
	if err := h.IPTables.Restore(ctx, []byte(rules), iptables.RestoreOptions{NoFlush: true}); err != nil {
		fmt.Println(err)
		return
	}
	// The hook jump rules kube-proxy keeps outside the restore input.
	if _, err := h.IPTables.EnsureRule(ctx, kernel.Prepend, "nat", "OUTPUT", "-j", "KUBE-SERVICES"); err != nil {
		fmt.Println("(no KUBE-SERVICES chain in this example):", err != nil)
	}

	r := h.Dial(h.External, "tcp", netip.MustParseAddrPort("10.96.0.10:80"))
	fmt.Println(r.Outcome, r.Server, r.Source.Addr() == h.ExternalIP)
}

// Choosing what to do when the kernel has no IPVS is the caller's business.
func ExampleNewIPVS() {
	v, err := kernel.NewIPVS(kernel.HostNamespace)
	if err != nil {
		fmt.Println("no kernel IPVS; use the userspace model instead:", err)
		return
	}
	defer v.Close()
}
