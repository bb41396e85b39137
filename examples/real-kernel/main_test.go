package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/kernelrun"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

func TestMain(m *testing.M) { os.Exit(kernel.RunTests(m)) }

// TestRealKernel: the lesson holds on both back ends, step for step (root; without it
// the simulation's half is checked and the kernel's skipped with the reason).
func TestRealKernel(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, "clkext"); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	wants := []string{
		"    sim:    3 connected, saw node:node-a (ok)",
		"    sim:    3 connected, saw the laptop's own address (ok)",
		"    sim:    1 dropped (ok)",
		"DNAT to 10.244.1.3:8080 (ok)",
	}
	if err := kernelrun.Supported(kubeproxy.IPTables, kernel.BackendNFT); err != nil {
		for _, w := range wants {
			if !strings.Contains(s, w) {
				t.Errorf("output lacks %q:\n%s", w, s)
			}
		}
		t.Skip("kernel back end unavailable: " + err.Error())
	}
	wants = append(wants,
		"    kernel: 3 connected, saw node:node-a (ok)",
		"    kernel: 3 connected, saw the laptop's own address (ok)",
		"    kernel: 1 dropped (ok)",
		"nowhere: every step has the same outcome under every back end",
		"sim PASS, kernel PASS")
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("output lacks %q:\n%s", w, s)
		}
	}
	if n := strings.Count(s, "DNAT to 10.244.1.3:8080 (ok)"); n != 2 {
		t.Errorf("DNAT to web-0 on %d back ends, want 2:\n%s", n, s)
	}
}
