package nftables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/kernel"
)

// netnsNFT is an Interface running nft in a network namespace: the kernel takes the
// transactions the Proxier writes. It has no Lister, so the Proxier relies on its
// record, as with the netsim adapter.
type netnsNFT struct {
	ns     string
	family corev1.IPFamily
}

// newNetns creates a throwaway network namespace (kernel.NewTestNetns: deleted when the
// test ends, and by the reaper if the process is killed); it skips the test when not
// root or ip or nft is missing.
func newNetns(t testing.TB) string {
	t.Helper()
	kernel.RequireHarness(t)
	kernel.RequireTools(t, "nft")
	return kernel.NewTestNetns(t)
}

func (n *netnsNFT) NewTransaction() *knftables.Transaction { return NewTransaction(n.family) }

func (n *netnsNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	return n.nft(ctx, tx.String(), "-f", "-")
}

// check runs nft --check on text.
func (n *netnsNFT) check(ctx context.Context, text string) error {
	return n.nft(ctx, text, "--check", "-f", "-")
}

func (n *netnsNFT) nft(ctx context.Context, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.ns, "nft"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return nil
}

// list returns nft list table for kube-proxy's table of the family.
func (n *netnsNFT) list(ctx context.Context) (string, error) {
	fam := "ip"
	if n.family == corev1.IPv6Protocol {
		fam = "ip6"
	}
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", n.ns, "nft", "list", "table", fam, TableName).CombinedOutput()
	return string(out), err
}

func (n *netnsNFT) deleteTable(ctx context.Context) error {
	fam := "ip"
	if n.family == corev1.IPv6Protocol {
		fam = "ip6"
	}
	return n.nft(ctx, fmt.Sprintf("add table %s %s\ndelete table %s %s\n", fam, TableName, fam, TableName), "-f", "-")
}

// TestRealNFTCases: every case's ruleset passes nft --check in a throwaway network
// namespace, applies, and applies again over itself (a second full sync); then a
// Proxier on the kernel syncs the case, drops its endpoints (a partial sync that
// flushes chains) and deletes the stale chains a second later, and the kernel's table
// equals the one a fresh full sync writes.
func TestRealNFTCases(t *testing.T) {
	ns := newNetns(t)
	ctx := context.Background()
	paths, _ := filepath.Glob("testdata/cases/*.yaml")
	for _, path := range paths {
		tc := loadCase(t, path)
		t.Run(tc.name, func(t *testing.T) {
			n := &netnsNFT{ns: ns, family: tc.cfg.Family}
			if n.family == "" {
				n.family = corev1.IPv4Protocol
			}
			if err := n.deleteTable(ctx); err != nil {
				t.Fatal(err)
			}
			text, err := Render(tc.services, tc.slices, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.check(ctx, string(text)); err != nil {
				t.Fatalf("nft --check: %v", err)
			}
			for i := 0; i < 2; i++ {
				if err := n.nft(ctx, string(text), "-f", "-"); err != nil {
					t.Fatalf("nft -f (%d): %v", i+1, err)
				}
			}
			full, err := n.list(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.deleteTable(ctx); err != nil {
				t.Fatal(err)
			}

			clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			cfg := tc.cfg
			cfg.Clock = clock.Now
			p, err := NewProxier(n, nil, cfg)
			if err != nil {
				t.Fatal(err)
			}
			steps := []struct {
				name  string
				empty bool
			}{{"full sync", false}, {"endpoints gone", true}, {"stale chains deleted", true}, {"endpoints back", false}}
			for _, s := range steps {
				slices := tc.slices
				if s.empty {
					slices = nil
				}
				if _, err := p.Sync(ctx, tc.services, slices); err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				clock.Advance(2 * time.Second)
			}
			if len(p.StaleChains()) != 0 {
				t.Errorf("stale chains left: %v", p.StaleChains())
			}
			got, err := n.list(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffLines(sortedListing(full), sortedListing(got)); d != "" {
				t.Errorf("kernel table after partial syncs differs from a full sync's:\n%s", d)
			}
		})
	}
}

// sortedListing sorts nft list output line by line (nft lists elements and objects in
// an order that depends on history).
func sortedListing(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		for _, part := range strings.Split(l, ",") {
			if p := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(part), "elements = {")); p != "" && p != "}" {
				lines = append(lines, strings.TrimSuffix(p, " }"))
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestRealNFTAffinityTimeout: a changed sessionAffinityConfig timeout reaches the
// kernel in a partial sync ("add set" with the new timeout updates the set; the
// knftables.Fake would keep the old one).
func TestRealNFTAffinityTimeout(t *testing.T) {
	ns := newNetns(t)
	ctx := context.Background()
	n := &netnsNFT{ns: ns, family: corev1.IPv4Protocol}
	p, err := NewProxier(n, nil, upstreamConfig(corev1.IPv4Protocol))
	if err != nil {
		t.Fatal(err)
	}
	eps := []*discoveryv1.EndpointSlice{makeSlice("ns1", "svc1", "p80", 80, "10.180.0.1")}
	for _, tc := range []struct {
		seconds int32
		want    string
	}{{60, "timeout 1m"}, {7200, "timeout 2h"}} {
		svc := makeService("ns1", "svc1", "172.30.0.41", "p80", 80, func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &tc.seconds}}
		})
		if _, err := p.Sync(ctx, []*corev1.Service{svc}, eps); err != nil {
			t.Fatal(err)
		}
		out, err := n.list(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "set affinity-") || !strings.Contains(out, tc.want) {
			t.Errorf("timeout %ds: listing lacks %q:\n%s", tc.seconds, tc.want, out)
		}
	}
}
