package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

func init() {
	kernelCmd := &cobra.Command{
		Use:   "kernel",
		Short: "The real-kernel adapter: check what this machine offers, build a namespace harness",
		Example: `  clusterlab kernel check                 # iptables backends, conntrack, IPVS, namespaces here
  clusterlab kernel check -o json
  sudo clusterlab kernel harness --pods 3 --second-node`,
	}

	var output string
	checkCmd := &cobra.Command{
		Use:   "check",
		Short: "Report the iptables backends, conntrack, ipset and nft tools, IPVS, namespace support, the kernel and nftables-mode support (kernel >= 5.13, nft >= 1.0.1), and which proxy modes can run here",
		Example: `  clusterlab kernel check
  clusterlab kernel check -o json | jq .ipvs
  clusterlab kernel check -o json | jq .nftables_mode`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep := kernel.Check(cmd.Context())
			modes := modeSupport(rep)
			switch output {
			case "text":
				fmt.Fprint(cmd.OutOrStdout(), rep.String())
				for _, m := range modes {
					state := "runnable here"
					if len(m.Missing) > 0 {
						state = "not here: " + strings.Join(m.Missing, "; ")
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%-20s %s\n", "mode "+m.Mode, state)
				}
			case "json", "yaml":
				return writeValue(cmd.OutOrStdout(), output, struct {
					kernel.CheckReport
					Modes []modeReport `json:"modes"`
				}{rep, modes})
			default:
				return checkOutput(output)
			}
			return nil
		},
	}
	checkCmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, json or yaml")

	var pods int
	var secondNode, nftables bool
	var topology, backend string
	harnessCmd := &cobra.Command{
		Use:   "harness",
		Short: "Build a namespace mini-cluster (needs root), print it, and remove it on Ctrl-C",
		Example: `  sudo clusterlab kernel harness
  sudo clusterlab kernel harness --pods 4 --second-node --topology routed --backend legacy
  sudo clusterlab kernel harness --nftables     # a node of kube-proxy's nftables mode`,
		Long: `Builds the differential-test harness: an external-client namespace, a node namespace
(bridge cbr0 or routed pod veths, ip_forward, route_localnet) and pod namespaces running
TCP and UDP echo servers on port 8080. Explore it with 'ip netns exec NAME ...' (for
example iptables-save in the node); Ctrl-C deletes every namespace it made. With
--nftables the node is set up as kube-proxy's nftables mode expects (route_localnet
left at 0; program it with 'ip netns exec NODE nft -f FILE').`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pods < 1 || pods > 200 {
				return badInput(fmt.Errorf("--pods %d: want 1 to 200", pods))
			}
			var topo kernel.Topology
			switch topology {
			case "auto":
			case "bridge", "routed":
				topo = kernel.Topology(topology)
			default:
				return badInput(fmt.Errorf("--topology %q: want auto, bridge or routed", topology))
			}
			var be kernel.Backend
			switch backend {
			case "nft", "legacy":
				be = kernel.Backend(backend)
			default:
				return badInput(fmt.Errorf("--backend %q: want nft or legacy", backend))
			}
			cfg := kernel.HarnessConfig{Topology: topo, SecondNode: secondNode, Backend: be, NFTables: nftables}
			for i := range pods {
				node := 0
				if secondNode && i%2 == 1 {
					node = 1
				}
				cfg.Pods = append(cfg.Pods, kernel.PodConfig{Name: fmt.Sprintf("pod%d", i), Node: node})
			}
			h, err := kernel.NewHarness(cfg)
			if err != nil {
				return err
			}
			defer h.Close()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "topology %s, br_netfilter %v\n", h.Topology, h.BrNetfilter)
			fmt.Fprintf(out, "external  netns %-22s %v\n", h.External.Name, h.ExternalIP)
			for _, n := range h.Nodes {
				fmt.Fprintf(out, "node%d     netns %-22s %v, pod subnet %v via %v\n", n.Index, n.Netns.Name, n.IP, n.PodCIDR, n.Gateway)
			}
			for _, p := range h.Pods {
				fmt.Fprintf(out, "%-9s netns %-22s %v on node%d, echo on tcp/udp %v\n", p.Name, p.Netns.Name, p.IP, p.Node.Index, p.Ports)
			}
			fmt.Fprintln(out, "Ctrl-C to remove it.")
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			return h.Close()
		},
	}
	harnessCmd.Flags().IntVar(&pods, "pods", 2, "number of pods")
	harnessCmd.Flags().BoolVar(&secondNode, "second-node", false, "add a second node (odd-numbered pods go there)")
	harnessCmd.Flags().StringVar(&topology, "topology", "auto", "pod network: auto, bridge or routed")
	harnessCmd.Flags().StringVar(&backend, "backend", "nft", "iptables backend of the nodes: nft or legacy")
	harnessCmd.Flags().BoolVar(&nftables, "nftables", false, "set the nodes up for kube-proxy's nftables mode (needs nft >= 1.0.1)")

	kernelCmd.AddCommand(checkCmd, harnessCmd)
	rootCmd.AddCommand(kernelCmd)
}

// modeReport says whether a proxy mode can run on this machine's kernel.
type modeReport struct {
	Mode string `json:"mode"`
	// Needs are the kernel features the mode needs (kubeproxy.ModeInfo.KernelNeeds).
	Needs []string `json:"needs"`
	// Missing says, for each feature missing here, why.
	Missing []string `json:"missing,omitempty"`
}

// modeSupport checks every registered mode's kernel needs against the report.
func modeSupport(rep kernel.CheckReport) []modeReport {
	var out []modeReport
	for _, m := range kubeproxy.Registered() {
		mr := modeReport{Mode: string(m.Mode), Needs: m.KernelNeeds}
		for _, f := range m.KernelNeeds {
			if err := rep.Feature(f); err != nil {
				mr.Missing = append(mr.Missing, f+": "+err.Error())
			}
		}
		out = append(out, mr)
	}
	return out
}
