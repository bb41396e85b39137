package main

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/clusterlab/clusterlab/internal/scale"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// TestScale runs the example small: every line it prints is there, with figures.
func TestScale(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, scale.Config{Nodes: 4, Services: 20, Pods: 40, Seed: 1, Mode: kubeproxy.IPTables, ShareRules: true}, 400); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^cluster: 4 nodes, 20 services, 40 pods, iptables mode, shared rules true$`,
		`(?m)^start pods and first sync of every node: \d+\.\d\d s `,
		`(?m)^memory: heap \d+\.\d MiB after GC \(\d+\.\d KiB a node\), peak RSS \d+\.\d MiB$`,
		`(?m)^probes, warm: \d+/s through random nodes, \d+/s in 2 nodes`,
	} {
		if !regexp.MustCompile(re).Match(out.Bytes()) {
			t.Errorf("no line matching %s in:\n%s", re, out.String())
		}
	}
	// -within: the third line, the probes kept within the first nodes.
	within = 2
	defer func() { within = 0 }()
	out.Reset()
	if err := run(&out, scale.Config{Nodes: 4, Services: 20, Pods: 40, Seed: 1, Mode: kubeproxy.IPTables, ShareRules: true}, 400); err != nil {
		t.Fatal(err)
	}
	if re := `(?m)^probes, warm, within the large cluster's first 2 nodes \(10 services\): \d+/s, \d+/s in 2 nodes to the same services`; !regexp.MustCompile(re).Match(out.Bytes()) {
		t.Errorf("no line matching %s in:\n%s", re, out.String())
	}
	if !regexp.MustCompile(`(?m)^probes: to the first 20 services \(2 pods each in both clusters\)`).Match(out.Bytes()) {
		t.Errorf("no probes line in:\n%s", out.String())
	}
	if err := run(&out, scale.Config{Nodes: 2, Services: 1, Pods: 1, Mode: "nosuchmode"}, 10); err == nil {
		t.Error("an unknown mode ran")
	}
}
