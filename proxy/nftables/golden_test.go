package nftables

import (
	"context"
	"path/filepath"
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
			fake := newFake(tc.cfg.Family)
			p, err := NewProxier(fake, nil, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Sync(context.Background(), tc.services, tc.slices)
			if err != nil {
				t.Fatal(err)
			}
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
