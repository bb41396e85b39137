package nftables

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

func newFake(family corev1.IPFamily) *knftables.Fake {
	if family == corev1.IPv6Protocol {
		return knftables.NewFake(knftables.IPv6Family, TableName)
	}
	return knftables.NewFake(knftables.IPv4Family, TableName)
}

// TestUpstreamGolden runs each testdata/cases case that names upstream output through
// a Proxier writing to knftables.Fake, and compares the Fake's dump with kube-proxy's
// own expected text for the same inputs after kube-proxy's sort normalisation. Render
// must write the same transaction.
func TestUpstreamGolden(t *testing.T) {
	paths, err := filepath.Glob("testdata/cases/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, path := range paths {
		tc := loadCase(t, path)
		if len(tc.file.Upstream) == 0 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			fake, _, res := syncCase(t, tc)
			want := sortTransaction(upstreamText(t, tc.file.Upstream))
			got := sortTransaction(asUpstream(fake.Dump()))
			if d := diffLines(want, got); d != "" {
				t.Errorf("dump differs from kube-proxy's expected output:\n%s", d)
			}

			text, err := Render(tc.services, tc.slices, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if string(text) != res.Transaction.String() {
				t.Errorf("Render differs from the proxier's first transaction:\n%s", diffLines(res.Transaction.String(), string(text)))
			}
		})
	}
}

// syncCase syncs a case's objects with a new Proxier into a knftables.Fake.
func syncCase(t *testing.T, tc testCase) (*knftables.Fake, *Proxier, *SyncResult) {
	t.Helper()
	fake := newFake(tc.cfg.Family)
	p, err := NewProxier(fake, nil, tc.cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background(), tc.services, tc.slices)
	if err != nil {
		t.Fatal(err)
	}
	return fake, p, res
}

// testNodeIPs are the addresses "fib ... type local" sees, as in kube-proxy's tests.
var testNodeIPs = []string{testNodeIP, "192.168.1.2", "192.168.99.11", testNodeIPv6, "2001:db8:1::2"}

// TestUpstreamFlows runs the packet flows of each case (kube-proxy's packetFlowTest
// vectors for the same inputs) through the tracer on the table a Proxier wrote.
func TestUpstreamFlows(t *testing.T) {
	paths, err := filepath.Glob("testdata/cases/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		tc := loadCase(t, path)
		if len(tc.file.Flows)+len(tc.file.FlowsWithoutEndpoints) == 0 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			fake, p, _ := syncCase(t, tc)
			runFlows(t, fake, tc.file.FibLocal, tc.file.Flows)
			if len(tc.file.FlowsWithoutEndpoints) > 0 {
				res, err := p.Sync(context.Background(), tc.services, nil)
				if err != nil {
					t.Fatal(err)
				}
				if res.Full {
					t.Error("second sync is full")
				}
				runFlows(t, fake, tc.file.FibLocal, tc.file.FlowsWithoutEndpoints)
			}
		})
	}
}

func runFlows(t *testing.T, fake *knftables.Fake, fibLocal []string, flows []caseFlow) {
	t.Helper()
	local := append(append([]string{}, testNodeIPs...), fibLocal...)
	for _, f := range flows {
		proto := strings.ToLower(f.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		out, masq, err := trace(fake, local, f.Src, proto, f.Dst, f.Port)
		if err != nil {
			t.Errorf("%s: %v", f.Name, err)
			continue
		}
		if out != f.Output || masq != f.Masq {
			t.Errorf("%s: %s -> %s:%d/%s gives %q masq %v, want %q masq %v", f.Name, f.Src, f.Dst, f.Port, proto, out, masq, f.Output, f.Masq)
		}
	}
}
