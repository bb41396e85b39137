// Command real-kernel runs one lesson, externalTrafficPolicy Local on a NodePort, in the
// simulation and on the real Linux kernel (network namespaces programmed with the rules
// the same kube-proxy code generates), and prints each step's outcome on both side by
// side. It needs root for the kernel; without it, it says so and shows the simulation.
package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/kernelrun"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/scenario"
)

//go:embed scenario.yaml
var scenarioYAML []byte

func main() {
	if err := run(context.Background(), os.Stdout, "clkex"); err != nil {
		log.Fatal(err)
	}
}

// run runs the scenario on both back ends (the kernel's namespaces named PREFIX...).
func run(ctx context.Context, w io.Writer, prefix string) error {
	s, err := scenario.Parse("scenario.yaml", scenarioYAML)
	if err != nil {
		return err
	}
	sim, err := scenario.Run(ctx, s, scenario.Options{})
	if err != nil {
		return err
	}
	if err := kernelrun.Supported(kubeproxy.IPTables, kernel.BackendNFT); err != nil {
		fmt.Fprintf(w, "no kernel back end here (%v): the simulation alone\n", err)
		for _, st := range sim.Steps {
			fmt.Fprintf(w, "[%d] %s\n    sim:    %s\n", st.Index, st.Title, outcome(st))
		}
		return nil
	}
	dp := kernelrun.New(kernelrun.Options{Prefix: prefix})
	defer dp.Close()
	kern, err := scenario.Run(ctx, s, scenario.Options{Datapath: dp, DatapathState: true})
	if err != nil {
		return err
	}
	if err := dp.Close(); err != nil {
		return err
	}
	cmp := scenario.CompareBackends(sim, kern, kernelrun.Explain(sim, kern))
	for i, st := range sim.Steps {
		fmt.Fprintf(w, "[%d] %s\n    sim:    %s\n    kernel: %s\n", st.Index, st.Title, outcome(st), outcome(kern.Steps[i]))
	}
	fmt.Fprint(w, cmp.DiffText())
	return nil
}

// outcome is a step's outcome in one line: who answered and the source they saw, or the
// conntrack entries' NAT.
func outcome(st scenario.StepResult) string {
	var parts []string
	if tr := st.Traffic; tr != nil {
		for _, k := range slices.Sorted(maps.Keys(tr.Results)) {
			parts = append(parts, fmt.Sprintf("%d %s", tr.Results[k], k))
		}
		for _, k := range slices.Sorted(maps.Keys(tr.SeenSources)) {
			if k == "client" {
				k = "the laptop's own address"
			}
			parts = append(parts, "saw "+k)
		}
	} else if st.Count != nil {
		parts = append(parts, st.Summary)
	}
	for _, e := range st.Expectations {
		if e.Field == "nat_destination" {
			parts = append(parts, "DNAT to "+e.Got)
		}
	}
	return strings.Join(parts, ", ") + " (" + st.Status + ")"
}
