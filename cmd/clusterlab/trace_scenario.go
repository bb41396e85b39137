package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/clusterlab/clusterlab/scenario"
)

// The scenario side of `clusterlab trace`: with a scenario file as its argument (and no
// --iptables-save), trace builds the scenario's cluster and traces a packet from a pod,
// node or external host to a name or VIP, and can draw it.

const traceScenarioLong = `

With a scenario file instead of --iptables-save, trace builds the scenario's cluster
(its manifests applied, and its first --after-step steps run) and follows one packet
from --from to --to through every node it crosses, with the kube-proxy mode the
scenario names (or --mode):
  --from pod:NS/NAME | node:NAME | external:NAME
  --to   NAME[:PORT] (resolved by the pod's resolver), IP[:PORT], service:NS/NAME:PORT,
         nodeport:NS/NAME[:PORT]@NODE, loadbalancer:NS/NAME:PORT, pod:NS/NAME:PORT;
         without a port, --port (default 80)
--all-branches follows every random choice (one outcome per backend, with its
probability). --reply also traces the answer: the receiver sends a packet back from
where the packet arrived to the source it saw, and its way shows where the reply is
un-DNATed (with --all-branches, the answer to one drawn path). Pictures: --svg FILE
draws the path top to bottom, node by node and hook by hook, with every rule that
matched (chain, dump line, rule text), the conntrack entries, DNAT and masquerade
(highlighted) and the routing decisions; an outcome a column, side by side with their
probabilities, and the answer in a column of its own (no Graphviz needed; the picture
clusterlab ui shows). --dot FILE writes the path as a Graphviz digraph (a box per hook
with the rules that matched and the NAT done, grouped by node; "-" is stdout);
--mermaid prints Mermaid flowchart text instead of the text trace. --pcap FILE replays the exchange with real
sockets (a TCP connection with one request and its answer, or a UDP datagram and its
answer) and writes every packet as it crossed each node's cbr0 and eth0, in order, as a
pcapng file for Wireshark or tcpdump -r, an interface per capture point ("node-a/cbr0")
and the virtual clock's time: the DNAT shows as the same packet with another
destination on another interface (--pcap-classic: the classic pcap format, one stream). -o json gives {from, to, dst, resolved, proto, mode, outcomes: [{result,
pod, node, addr, seen_src, reason, probability, trace: {steps}}], reply: {from, src,
dst, outcome (as an outcome's), note}, pcap}.`

const traceScenarioExamples = `
  clusterlab trace testdata/scenarios/clusterip-trace.yaml --from pod:default/client --to my-service:80
  clusterlab trace testdata/scenarios/clusterip-trace.yaml --from pod:default/client --to my-service --all-branches --dot path.dot
  clusterlab trace scenario.yaml --from external:laptop --to nodeport:default/web@node-b --svg path.svg --pcap path.pcap`

type scenarioTraceOptions struct {
	to          string
	port        int
	afterStep   int
	mode        string
	dot         string
	svg         string
	mermaid     bool
	pcap        string
	pcapClassic bool
}

var scenarioTraceFlags = []string{"to", "port", "after-step", "mode", "dot", "svg", "mermaid", "pcap", "pcap-classic"}
var dumpTraceFlags = []string{"ipsets", "src", "dst", "dport", "local-ips", "in-interface", "out-interface", "every-rule",
	"icmp-type", "icmp-code", "ctstate", "manifests", "ipvs-save", "node", "iface-addr", "lenient", "conntrack", "route-localnet", "hairpin", "bridge-nf-call-iptables"}

func addScenarioTraceFlags(f *pflag.FlagSet, so *scenarioTraceOptions) {
	f.StringVar(&so.to, "to", "", "scenario mode: the destination: NAME[:PORT], IP[:PORT], service:NS/NAME:PORT, nodeport:NS/NAME@NODE, ...")
	f.IntVar(&so.port, "port", 80, "scenario mode: the destination port when --to has none")
	f.IntVar(&so.afterStep, "after-step", 0, "scenario mode: run the scenario's first N steps before tracing")
	f.StringVar(&so.mode, "mode", "", "scenario mode: the kube-proxy mode (default: the scenario's)")
	f.StringVar(&so.dot, "dot", "", "scenario mode: write the path as Graphviz DOT to FILE (- for stdout)")
	f.StringVar(&so.svg, "svg", "", "scenario mode: write the path as SVG to FILE, drawn top to bottom, hook by hook (no Graphviz needed)")
	f.BoolVar(&so.mermaid, "mermaid", false, "scenario mode: print the path as Mermaid flowchart text instead of the text trace")
	f.StringVar(&so.pcap, "pcap", "", "scenario mode: write a pcapng of the exchange, as it crossed every node's interfaces (an interface per capture point, virtual-clock timestamps), to FILE")
	f.BoolVar(&so.pcapClassic, "pcap-classic", false, "scenario mode: write --pcap in the classic libpcap format (no interface names) instead of pcapng")
}

func changed(cmd *cobra.Command, names []string) []string {
	var out []string
	for _, n := range names {
		if f := cmd.Flags().Lookup(n); f != nil && f.Changed {
			out = append(out, "--"+n)
		}
	}
	return out
}

func runScenarioTrace(cmd *cobra.Command, file string, o *traceOptions, so *scenarioTraceOptions) error {
	if o.iptablesSave != "" {
		return badInput(errors.New("a scenario file and --iptables-save: give one"))
	}
	if c := changed(cmd, dumpTraceFlags); len(c) > 0 {
		return badInput(fmt.Errorf("%s: only for tracing an --iptables-save dump; a scenario trace takes --from and --to", strings.Join(c, ", ")))
	}
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if o.from == "" || so.to == "" {
		return badInput(errors.New("a scenario trace needs --from (pod:NS/NAME, node:NAME or external:NAME) and --to"))
	}
	if so.mermaid && structured(o.output) {
		return badInput(fmt.Errorf("--mermaid and -o %s: give one", o.output))
	}
	if err := checkModeFlag("--mode", so.mode); err != nil {
		return err
	}
	s, err := scenario.Load(file)
	if err != nil {
		return badInput(err)
	}
	if cmd.Flags().Changed("seed") {
		s.Cluster.Seed = o.seed
	}
	opts := scenario.TraceOptions{From: o.from, To: so.to, Port: so.port, Proto: o.proto, AllBranches: o.allBranches, AfterStep: so.afterStep, Mode: so.mode, Reply: o.reply}
	if cmd.Flags().Changed("sport") {
		opts.SrcPort = o.sport
	}
	var pcap bytes.Buffer
	if so.pcap != "" {
		opts.Pcap = &pcap
		opts.PcapClassic = so.pcapClassic
	}
	res, err := scenario.Trace(cmdContext(cmd), s, opts)
	if err != nil {
		return scenarioErr(err)
	}
	out := cmd.OutOrStdout()
	if so.pcap != "" {
		if err := os.WriteFile(so.pcap, pcap.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if so.dot != "" {
		if so.dot == "-" {
			if _, err := fmt.Fprint(out, res.DOT()); err != nil {
				return err
			}
		} else if err := os.WriteFile(so.dot, []byte(res.DOT()), 0o644); err != nil {
			return err
		}
	}
	if so.svg != "" {
		if err := os.WriteFile(so.svg, res.VerticalSVG(), 0o644); err != nil {
			return err
		}
	}
	switch {
	case so.dot == "-":
		return nil
	case so.mermaid:
		_, err = fmt.Fprint(out, res.Mermaid())
		return err
	}
	return writeResult(out, o.output, res.JSON, res.WriteText)
}
