package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/clusterlab/clusterlab/scenario"
)

// `clusterlab policy`: NetworkPolicy questions answered by the simulation. Both
// subcommands build the cluster of the manifests (three nodes, the pods placed by the
// scheduler, kube-proxy in --mode) and probe through its datapath: kube-proxy's DNAT
// and the NetworkPolicy handler of each node, as a connection would meet them.

type policyOptions struct {
	manifests []string
	mode      string
	flavour   string
	output    string
	proto     string
}

func (o *policyOptions) query() scenario.PolicyQuery {
	return scenario.PolicyQuery{Manifests: o.manifests, Mode: o.mode, Flavour: o.flavour}
}

func (o *policyOptions) check() error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if len(o.manifests) == 0 {
		return badInput(errors.New("--manifests: give the manifest files (pods, namespaces, services, NetworkPolicies)"))
	}
	return checkModeFlag("--mode", o.mode)
}

func addPolicyFlags(cmd *cobra.Command, o *policyOptions) {
	f := cmd.Flags()
	f.StringSliceVar(&o.manifests, "manifests", nil, "manifest files (YAML or JSON, kubectl get -o yaml output too); repeat or comma-separate")
	f.StringVar(&o.mode, "mode", "", "the kube-proxy mode (default iptables)")
	f.StringVar(&o.flavour, "network-policy", "", "how nodes treat node traffic under policy: calico (default) or cilium")
	f.StringVar(&o.proto, "proto", "tcp", "tcp, udp or sctp")
	f.StringVarP(&o.output, "output", "o", "text", "text, json or yaml")
}

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "NetworkPolicy verdicts through the simulated datapath: explain one connection, or the matrix of every pod pair",
		Long: `NetworkPolicy verdicts through the simulated datapath. Both subcommands build the
cluster of --manifests (three nodes; the pods placed by the scheduler; kube-proxy in
--mode) and send packets through it, so the answer is the simulation's: kube-proxy's
DNAT first (policy sees pod IPs and target ports, never ClusterIPs), then the
NetworkPolicy handler on the source pod's node (egress) and the destination pod's node
(ingress). --network-policy picks how nodes' own traffic is treated (calico: the local
host reaches its pods, other nodes are plain addresses; cilium: the same, but ipBlock
does not select nodes).`,
	}
	cmd.AddCommand(newPolicyExplainCmd(), newPolicyMatrixCmd())
	return cmd
}

func init() { rootCmd.AddCommand(newPolicyCmd()) }

func newPolicyExplainCmd() *cobra.Command {
	var o policyOptions
	var from, to string
	cmd := &cobra.Command{
		Use:   "explain --manifests FILE... --from pod:NS/NAME|ip:ADDR --to service:NS/NAME:PORT|pod:NS/NAME:PORT|ip:ADDR:PORT",
		Short: "Whether a connection is allowed, through Service routing and NetworkPolicy, and which policy and rule decided",
		Long: `Whether a connection from --from reaches --to, through kube-proxy's Service routing
and NetworkPolicy together. A Service's connection can go to any of its backends: each
is probed (with kube-proxy's probability for it) and judged; the connection is
"allowed" only when every backend is reachable, since a client would otherwise fail
some of the time. --from ip:ADDR is a node when ADDR is a node's, a pod when it is a
pod's, and otherwise an external host with that address.

-o json gives {from, to, protocol, mode, allowed, reason, policies: [{namespace, name,
direction, rule, index, pod, allowed}], backends: [{pod, addr, probability, allowed,
result, reason, policies}]}: policies are the NetworkPolicies that decided (for an
allowed connection the policy and rule that allowed each direction; for a denied one
every policy isolating the pod, with rule empty: none of their rules allowed it).`,
		Example: `  clusterlab policy explain --manifests testdata/policy/web.yaml --from pod:default/client --to service:default/web:80
  clusterlab policy explain --manifests app.yaml,policies.yaml --from ip:203.0.113.7 --to pod:default/web:8080 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if from == "" || to == "" {
				return badInput(errors.New("give --from (pod:NS/NAME or ip:ADDR) and --to (service:NS/NAME:PORT, pod:NS/NAME:PORT or ip:ADDR:PORT)"))
			}
			ex, err := scenario.ExplainPolicy(o.query(), from, to, o.proto)
			if err != nil {
				return scenarioErr(err)
			}
			js := func() ([]byte, error) { return jsonLine(ex) }
			return writeResult(cmd.OutOrStdout(), o.output, js, func(w io.Writer) error { return writeExplanation(w, ex) })
		},
	}
	addPolicyFlags(cmd, &o)
	cmd.Flags().StringVar(&from, "from", "", "pod:NS/NAME or ip:ADDR")
	cmd.Flags().StringVar(&to, "to", "", "service:NS/NAME:PORT, pod:NS/NAME:PORT or ip:ADDR:PORT")
	return cmd
}

func writeExplanation(w io.Writer, ex *scenario.PolicyExplanation) error {
	verdict := "DENIED"
	if ex.Allowed {
		verdict = "ALLOWED"
	}
	fmt.Fprintf(w, "%s -> %s (%s, kube-proxy %s): %s\n", ex.From, ex.To, ex.Protocol, ex.Mode, verdict)
	for _, b := range ex.Backends {
		mark := "X"
		if b.Allowed {
			mark = "."
		}
		who := b.Pod
		if who == "" {
			who = b.Addr
		} else if b.Addr != "" {
			who += " (" + b.Addr + ")"
		}
		fmt.Fprintf(w, "  %s %s  p=%.3g  %s\n", mark, who, b.Probability, b.Reason)
	}
	_, err := fmt.Fprintf(w, "reason: %s\n", ex.Reason)
	return err
}

func newPolicyMatrixCmd() *cobra.Command {
	var o policyOptions
	var port int
	var diff string
	cmd := &cobra.Command{
		Use:   "matrix --manifests FILE... --port N",
		Short: "The reachability truth table of every pod pair, as the upstream network-policy e2e tests print it",
		Long: `The reachability of every pod pair of --manifests on --port, one packet from each
pod to each pod's address through the datapath, printed as the upstream Kubernetes
network-policy e2e tests print their truth tables: a row per source, a column per
destination, "." allowed and "X" denied. --diff OTHER.yaml replaces the manifests'
NetworkPolicies by OTHER.yaml's in the same cluster and prints the cells that change.

-o json gives a list of {from, to, port, protocol, allowed, reason} with pods as
NS/NAME; with --diff, {before: [...], after: [...], changed: [{from, to, port,
protocol, before, after}]}.`,
		Example: `  clusterlab policy matrix --manifests testdata/policy/web.yaml --port 80
  clusterlab policy matrix --manifests app.yaml,policies.yaml --port 8080 --diff new-policies.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if !cmd.Flags().Changed("port") {
				return badInput(errors.New("--port: give the destination port"))
			}
			before, after, err := scenario.PolicyMatrices(o.query(), port, o.proto, diff)
			if err != nil {
				return scenarioErr(err)
			}
			out := cmd.OutOrStdout()
			if after == nil {
				js := func() ([]byte, error) { return jsonLine(before.Cells) }
				return writeResult(out, o.output, js, func(w io.Writer) error {
					_, err := io.WriteString(w, before.Text())
					return err
				})
			}
			changed := matrixChanges(before, after)
			js := func() ([]byte, error) {
				return jsonLine(struct {
					Before  []scenario.MatrixCell `json:"before"`
					After   []scenario.MatrixCell `json:"after"`
					Changed []matrixChange        `json:"changed"`
				}{before.Cells, after.Cells, changed})
			}
			return writeResult(out, o.output, js, func(w io.Writer) error {
				fmt.Fprintf(w, "before (--manifests):\n%s\nafter (--diff %s):\n%s\n", before.Text(), diff, after.Text())
				if len(changed) == 0 {
					_, err := fmt.Fprintln(w, "no cell changes")
					return err
				}
				fmt.Fprintf(w, "%d cells change:\n", len(changed))
				for _, c := range changed {
					fmt.Fprintf(w, "  %s -> %s: %s => %s\n", c.From, c.To, mark(c.Before), mark(c.After))
				}
				return nil
			})
		},
	}
	addPolicyFlags(cmd, &o)
	cmd.Flags().IntVar(&port, "port", 0, "the destination port (the pods' target port)")
	cmd.Flags().StringVar(&diff, "diff", "", "a manifest file of NetworkPolicies to compare with the manifests' own")
	return cmd
}

type matrixChange struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Before   bool   `json:"before"`
	After    bool   `json:"after"`
}

func matrixChanges(before, after *scenario.PolicyMatrix) []matrixChange {
	out := []matrixChange{}
	for _, b := range before.Cells {
		a := after.Cell(b.From, b.To)
		if a.Allowed != b.Allowed {
			out = append(out, matrixChange{From: b.From, To: b.To, Port: b.Port, Protocol: b.Protocol, Before: b.Allowed, After: a.Allowed})
		}
	}
	return out
}

func mark(allowed bool) string {
	if allowed {
		return "."
	}
	return "X"
}

// jsonLine is v as indented JSON ending in a newline.
func jsonLine(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return append(b, '\n'), err
}
