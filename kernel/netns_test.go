package kernel

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// proxy/ipvs's ExecIPSets takes the same value for the caller's own namespace.
func TestHostNamespaceIsOneValue(t *testing.T) {
	if HostNamespace != ipvs.HostNamespace {
		t.Fatalf("kernel.HostNamespace %q != ipvs.HostNamespace %q", HostNamespace, ipvs.HostNamespace)
	}
}

// Every adapter refuses an empty namespace and runs nothing: acting on the caller's
// own namespace takes HostNamespace, said in so many words (issue 23).
func TestAdaptersRefuseEmptyNamespace(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	noCalls := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNoNamespace) {
			t.Errorf("%s: %v; want ErrNoNamespace", what, err)
		} else if !strings.Contains(err.Error(), "HostNamespace") {
			t.Errorf("%s: %q does not say how to act on the own namespace", what, err)
		}
		if len(f.calls) != 0 {
			t.Errorf("%s ran %q", what, f.calls)
		}
		f.reset()
	}
	for _, b := range []Backend{BackendAuto, BackendNFT, BackendLegacy} {
		_, err := newIPTables(ctx, IPTablesOptions{Backend: b}, f)
		noCalls("iptables "+string(b), err)
	}
	_, err := DetectBackend(ctx, "")
	noCalls("DetectBackend", err)

	ct := newConntrack(ConntrackOptions{}, f)
	_, err = ct.Delete(proxy.ConntrackFilter{Protocol: 17})
	noCalls("conntrack Delete", err)
	noCalls("conntrack Flush", ct.Flush(ctx))
	_, err = ct.List(ctx, proxy.ConntrackFilter{})
	noCalls("conntrack List", err)

	_, err = newNFTables(ctx, NFTablesOptions{}, f)
	noCalls("nftables", err)
	var zero NFTables
	noCalls("zero NFTables ApplyScript", zero.ApplyScript(ctx, "flush ruleset\n"))

	// The netlink adapters check before they open anything (NewIPVS would otherwise
	// report the missing IPVS first; EnsureNFAcct would create the object here).
	_, err = NewIPVS("")
	noCalls("NewIPVS", err)
	noCalls("EnsureNFAcct", EnsureNFAcct("", "cltest_refused"))
	_, err = ListNFAcct("")
	noCalls("ListNFAcct", err)

	// Names that are no namespace under /run/netns are refused too, not passed on.
	for _, bad := range []string{"a/b", "-n", "..", "a b"} {
		_, err := newIPTables(ctx, IPTablesOptions{Backend: BackendNFT, Netns: bad}, f)
		if err == nil || !strings.Contains(err.Error(), "bad network namespace name") || len(f.calls) != 0 {
			t.Errorf("Netns %q: %v, calls %q; want a refusal", bad, err, f.calls)
		}
		f.reset()
	}

	// HostNamespace runs the tools as they are, without `ip netns exec`.
	ipt := newFakeIPTables(t, f, IPTablesOptions{Backend: BackendNFT, Netns: HostNamespace}, nftVersion)
	if err := ipt.Restore(ctx, []byte("*nat\nCOMMIT\n"), iptables.RestoreOptions{}); err != nil || len(f.calls) != 1 || f.calls[0] != "iptables-nft-restore -w 5" {
		t.Errorf("HostNamespace restore: %v, calls %q", err, f.calls)
	}
}
