package scenario

import (
	"context"
	"testing"
)

// BenchmarkParseDemo: reading and checking the demo scenario (manifests included).
func BenchmarkParseDemo(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DemoScenario(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunDemoIPTables: the demo scenario end to end under the iptables mode
// (cluster, kube-dns, 9 steps, about 250 probed connections).
func BenchmarkRunDemoIPTables(b *testing.B) {
	s, err := DemoScenario()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rep, err := Run(context.Background(), s, Options{Mode: "iptables"})
		if err != nil || !rep.Passed {
			b.Fatal(err)
		}
	}
}

// BenchmarkDemo: `clusterlab demo` without the printing: the demo scenario under every
// mode this build has.
func BenchmarkDemo(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		d, err := RunDemo(context.Background(), Options{})
		if err != nil || !d.Passed {
			b.Fatal(err)
		}
	}
}
