package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/clusterlab/clusterlab/scenario"
)

const demoLong = `Run the built-in demonstration: a 3-node cluster in this process, the example from
the Kubernetes Services documentation (three pods labelled app=MyApp on TCP port 9376
behind the Service my-service, port 80), and a client pod. Under every kube-proxy mode
this build has, the client connects to the VIP and to the DNS name; the output shows how
the connections spread over the backends and what source address the backends saw, one
packet's way through the rules, a backend deleted while traffic moves on, and the
Service turned into a NodePort reached from outside the cluster.

It takes a few seconds and needs no arguments, no root and no network. -o json gives
the same facts to programs (modes, nodes, service, backends, traffic per mode, trace,
delete, nodeport, the full comparison of the runs, passed). The scenario it runs is
printed by --scenario; save it and change it for clusterlab run.

Exit codes: 0 when every step went as the demonstration expects, 1 otherwise.`

func init() {
	var output string
	var show bool
	cmd := &cobra.Command{
		Use:   "demo [-o text|json]",
		Short: "Run the built-in demonstration (no arguments, a few seconds)",
		Long:  demoLong,
		Example: `  clusterlab demo
  clusterlab demo -o json | jq '.traffic[] | {mode, vip}'
  clusterlab demo --scenario > my-scenario.yaml && clusterlab run my-scenario.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if show {
				_, err := cmd.OutOrStdout().Write(scenario.DemoYAML())
				return err
			}
			prog := newProgress(cmd.ErrOrStderr(), false)
			d, err := scenario.RunDemo(cmdContext(cmd), scenario.Options{Progress: prog.step})
			prog.done()
			if err != nil {
				return err
			}
			if err := writeResult(cmd.OutOrStdout(), output, d.JSON, d.WriteText); err != nil {
				return err
			}
			if !d.Passed {
				return fmt.Errorf("the demonstration did not go as expected under every mode")
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, json or yaml")
	cmd.Flags().BoolVar(&show, "scenario", false, "print the demonstration's scenario file instead of running it")
	rootCmd.AddCommand(cmd)
}
