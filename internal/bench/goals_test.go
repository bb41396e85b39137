package main

import (
	"strings"
	"testing"
)

const syncSample = `BenchmarkEmulatorSync10kServices/full-2         	       5	 250000000 ns/op	       240.5 cpu-ms/op	    340012 rules	 1563375 B/op	     904 allocs/op
BenchmarkEmulatorSync10kServices/partial-2      	     200	  26928564 ns/op	         8.949 cpu-ms/op	   1395238 restore-bytes
BenchmarkKernelRestore10kServices/legacy-2      	       1	62000000000 ns/op	   1.23 MB/s
BenchmarkModes/kind=probe/mode=iptables/services=10-2   2000  4000 ns/op  3000 cpu-ns/probe  100000 lo-ns/op  2500 ns/probe
`

const scaleSample = `cluster: 50 nodes, 1000 services, 3000 pods, iptables mode, shared rules true
fill the API server: 0.37 s
start pods and first sync of every node: 0.99 s (CPU 0.92 s over both)
memory: heap 47.2 MiB after GC (967.2 KiB a node), peak RSS 79.6 MiB
probes, first pass: 4500/s through random nodes, 69000/s in 2 nodes
probes, warm: 55000/s through random nodes, 60000/s in 2 nodes (1.09× the wall time, 1.20× the CPU)
`

func TestParseScale(t *testing.T) {
	m, err := parseScale(scaleSample)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"fill-s": 0.37, "start-s": 0.99, "cpu-s": 0.92, "heap-MiB": 47.2, "KiB/node": 967.2, "peak-MiB": 79.6,
		"probes/s": 55000, "2node-probes/s": 60000, "x-2node": 1.09, "x-2node-cpu": 1.20}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if len(m) != len(want) {
		t.Errorf("metrics %v, want %v", m, want)
	}
	// Without the build lines it is an error naming what is missing.
	if _, err := parseScale("cluster: 1 nodes\n"); err == nil || !strings.Contains(err.Error(), "fill-s") {
		t.Errorf("error %v, want one naming fill-s", err)
	}
}

func TestGoals(t *testing.T) {
	med := medians(parse(strings.NewReader(syncSample)))
	for _, k := range []string{"sync/full", "sync/partial", "sync/kernel-legacy", "probe/iptables/10"} {
		if _, ok := med[k]; !ok {
			t.Fatalf("parse: no row %s in %v", k, med)
		}
	}
	if med["sync/full"]["rules"] != 340012 || med["sync/partial"]["cpu-ms/op"] != 8.949 {
		t.Errorf("sync rows: %v", med)
	}
	m, err := parseScale(scaleSample)
	if err != nil {
		t.Fatal(err)
	}
	med["scale/50/1000/3000"] = m
	med["scale/5000/10000/150000"] = map[string]float64{"failed": 1}
	rows := goals(med, map[string][]string{"sync": {"go test ./proxy/iptables/"}, "modes/probe": {"go test ./proxy/kubeproxy/"}, "scale": {"go run ./examples/scale"}})
	byGoal := map[string]goalRow{}
	for _, r := range rows {
		byGoal[r.Goal] = r
	}
	check := func(prefix, met, figure string) {
		t.Helper()
		for g, r := range byGoal {
			if strings.HasPrefix(g, prefix) {
				if r.Met != met || !strings.Contains(r.Figure, figure) {
					t.Errorf("%s: met %q figure %q, want %q and %q", g, r.Met, r.Figure, met, figure)
				}
				return
			}
		}
		t.Errorf("no goal %q in %v", prefix, rows)
	}
	check("Generate + load", "yes", "250.0 ms")
	if r := byGoal["Generate + load 10,000 services × 10 endpoints (full sync into the emulator)"]; !strings.Contains(r.Anchor, "62.00 s (248.0× ours)") || r.Cmd != "`go test ./proxy/iptables/`" {
		t.Errorf("full sync anchor %q, command %q", r.Anchor, r.Cmd)
	}
	check("Partial sync", "**no**", "26.9 ms")
	for _, r := range rows {
		if strings.HasPrefix(r.Goal, "Probes through") && r.Cmd != "`go test ./proxy/kubeproxy/`" {
			t.Errorf("probe row command %q, want the probe benchmark's alone", r.Cmd)
		}
	}
	check("Probes through the iptables mode, 10 services", "yes", "400k/s")
	check("Connections through a ClusterIP, iptables mode, 10 services", "–", "not measured")
	check("DNS: `clusterlab dns serve`, cache on", "–", "not measured")
	check("Scale: build + first sync of every node, 50 nodes", "yes", "1.4 s")
	check("Scale: a warm probe through a random node, 50 nodes", "yes", "1.09×")
	check("Scale: 5000 nodes", "**no**", "failed")

	var out strings.Builder
	printGoals(&out, rows)
	if n := strings.Count(out.String(), "\n| ") - 1; n != len(rows) { // less the header
		t.Errorf("table has %d rows, want %d:\n%s", n, len(rows), out.String())
	}
}

func TestShellCmd(t *testing.T) {
	var out strings.Builder
	printGoals(&out, []goalRow{{Cmd: "`go test -bench '^B/(a|b)$'`"}})
	if !strings.Contains(out.String(), `(a\|b)`) {
		t.Errorf("a | in a command is not escaped in the table:\n%s", out.String())
	}
	if got := shellCmd([]string{"go", "test", "-bench", "^B$/x"}); got != "go test -bench '^B$/x'" {
		t.Errorf("got %s", got)
	}
}
