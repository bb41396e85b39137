package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/scenario"
)

const runLong = `Run a scenario file: build the cluster it describes (nodes, networks, kube-proxy
mode and version, node kernel settings, cluster DNS), apply its Kubernetes manifests
(inline or by path; Deployments and ReplicaSets become pods), and run its steps in
order on a virtual clock, printing what each step did and saw and whether its
expectations held.

With --modes the scenario runs once per kube-proxy mode and the output ends with the
steps whose outcomes differ between the modes (results, which backends answered, the
source address they saw, why attempts failed, DNS answers, counts, failed
expectations). Modes this build has: %s.

With --versions the scenario runs once per kube-proxy version (1.22,1.28,1.33) in its
mode (or --mode's) and the output ends with where the versions differ, the same way.
A version the mode is not modelled in is an error naming the releases it is.

With --backend kernel (root) the traffic runs on the real Linux kernel: the scenario's
cluster is built as network namespaces named after the run (clk<pid>-...): a node each
(bridge, veths, uplink), a pod each (its address, echo servers on its containerPorts),
and the outside world (the external hosts' addresses). Each node is programmed with
the rules its kube-proxy mode and version generate (iptables via iptables-nft-restore,
or iptables-legacy-restore with --kernel-iptables legacy; nftables via nft; IPVS where
the kernel has ip_vs: otherwise the run is refused naming what is missing),
re-programmed whenever the simulated kube-proxy syncs; node settings become sysctls
and the bridge's hairpin mode. The simulation stays the control plane (API server,
controllers, probes, the clock); connect and send steps make real connections, dns
steps and names send real queries from the pod's namespace to the kube-dns Service
(the cluster DNS server runs in the CoreDNS pods' namespaces), check conntrack reads
conntrack -L, advance and at wait for real up to 3s (longer jumps move the
simulation's clock only, and say so). Steps the kernel cannot do (crafted packets,
all_branches, DNS packets held together, HTTP, faults, partitions, kill_node,
conntrack_stats, health checks) are refused with the reason (status refused; they do
not fail the run). With --backend both the scenario runs in the simulation and on the
kernel and the output ends with the steps whose outcomes differ, each labelled with a
by-design difference where one explains it; the kernel's rules, conntrack table and
namespaces' packet counters after each differing step are in -o json
(differences[].datapath_state) and, with --keep DIR, in DIR/step-N-NODE.rules,
.conntrack and .counters. The namespaces are removed at the end, on Ctrl-C and
SIGTERM, and, after a crash, by the next run.

A scenario file is YAML:

  name: my-service answers
  cluster:
    nodes: [{name: node-a}, {name: node-b}]   # default: node-a, node-b, node-c
    proxy: {mode: iptables, version: "1.33"}   # ipvs: scheduler: rr|wrr|lc|sh|mh|...
    node_settings: {hairpin: true, rp_filter: 0, tcp_be_liberal: false}
    dns: kube-dns                              # or direct, off
    external_hosts: [{name: laptop}]
  manifests:
    - path: app.yaml                           # relative to the scenario file
    - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {containers: [{name: c, image: busybox}]}}
  steps:
    - connect: {from: pod:default/client, to: my-service:80, count: 30}
      expect: {result: connected, backends: 3, spread: 0.5, seen_source: client}
    - delete_pod: {selector: app=web, count: 1, grace: 30s}
    - advance: 30s
    - check: {conntrack: {node: node-a, proto: udp, dst: service:default/dns:53}}
      expect: {count: 0}

Step actions: connect, send, dns, check (conntrack, endpoints, conntrack_stats,
health_check), apply, delete,
delete_pod, kill_pod, set_ready, scale, evict, set_phase, set_health, advance, fault,
partition, heal, kill_node,
sync (pause, resume, now, delay, rules_only, hold_conntrack, clean_conntrack),
restart_proxy, restart_apiserver, node_settings, update_status; "at: 10s" runs a step
at a virtual time; a dns step's together holds its queries in flight together. Expectations: result, min_success, reaches, not_reaches, backends, spread,
seen_source, decided_by (connect, send), probabilities (send with all_branches);
rcode, answer (dns); count, ready, serving, terminating, present, nat_destination (check conntrack,
endpoints), counters (check conntrack_stats), status, local_endpoints (check
health_check); endpoints, endpoints_include (check endpoints); status, body
(connect with http); rejected (apply); result failed (refused or dropped); ctstate,
answered_with (send with a crafted packet); repair (restart_apiserver). The package
documentation of github.com/clusterlab/clusterlab/scenario lists every field.

Traffic is made by probes (synthetic packets through the same datapath: synchronous,
deterministic, traceable) unless a step says via: netstack (real TCP/UDP sockets in the
source's network stack); in the userspace mode connect steps use netstack, because a
program on the node picks the backend and a probe stops at its listener.

Output -o json (or -o yaml) is the report (with --modes: {modes, reports, differences, passed}; with
--versions: {versions, reports, differences, passed}, facts by_version); every
step has index, title, action, line, time, status (ok, failed, error), summary, details,
and traffic / dns / count / expectations as the step has them.

Exit codes: 0 every expectation held, 1 an expectation failed or a step could not run,
2 the scenario file (or a flag) is bad: errors name the file, the line and the field.`

type runOptions struct {
	output   string
	modes    []string
	versions []string
	mode     string
	progress bool
	backend  string
	keep     string
	prefix   string // namespace name prefix of the kernel back end (hidden; tests)
	iptables string // the kernel back end's iptables backend: nft or legacy
}

func init() { rootCmd.AddCommand(newRunCmd()) }

func newRunCmd() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run FILE [-o text|json] [--modes iptables,ipvs,userspace | --versions 1.22,1.28,1.33 | --backend kernel|both]",
		Short: "Run a scenario file and check its expectations",
		Long:  fmt.Sprintf(runLong, strings.Join(scenario.AvailableModes(), ", ")) + "\n\n" + scenario.VersionNotes(),
		Example: `  clusterlab run testdata/scenarios/quickstart.yaml
  clusterlab run testdata/scenarios/session-affinity.yaml -o json
  sudo clusterlab run --backend both testdata/scenarios/stale-udp-conntrack.yaml
  clusterlab run --modes iptables,ipvs,userspace testdata/scenarios/session-affinity.yaml
  clusterlab run --versions 1.31,1.32 testdata/scenarios/kube-proxy-restart.yaml`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return badInput(fmt.Errorf("run needs one scenario file, got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runScenario(cmd, args[0], &o) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "text", "output format: text, json or yaml")
	f.StringSliceVar(&o.modes, "modes", nil, "run under each of these kube-proxy modes and compare (comma-separated)")
	f.StringSliceVar(&o.versions, "versions", nil, "run under each of these kube-proxy versions and compare (comma-separated, 1.N)")
	f.StringVar(&o.mode, "mode", "", "run under this kube-proxy mode instead of the scenario's")
	f.BoolVar(&o.progress, "progress", false, "print a progress line on stderr (default: only when stderr is a terminal)")
	f.StringVar(&o.backend, "backend", "sim", "where the traffic runs: sim (the simulation), kernel (the real kernel in network namespaces; root) or both (and compare)")
	f.StringVar(&o.prefix, "netns-prefix", "clk", "start of the kernel back end's namespace names (1-8 lower-case letters and digits)")
	_ = f.MarkHidden("netns-prefix")
	f.StringVar(&o.iptables, "kernel-iptables", "nft", "with --backend kernel or both: the iptables backend of the kernel's nodes (nft or legacy; the iptables and ipvs modes)")
	f.StringVar(&o.keep, "keep", "", "with --backend both: write the kernel's rules and conntrack table of each differing step under this directory")
	_ = cmd.RegisterFlagCompletionFunc("mode", completeModes(false))
	_ = cmd.RegisterFlagCompletionFunc("modes", completeModes(true))
	return cmd
}

// completeModes completes a kube-proxy mode from the registered ones; for a
// comma-separated list (--modes) it completes the last item with the modes not yet named.
func completeModes(list bool) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		prefix, named := "", map[string]bool{}
		if i := strings.LastIndex(toComplete, ","); list && i >= 0 {
			prefix = toComplete[:i+1]
			for _, m := range strings.Split(toComplete[:i], ",") {
				named[m] = true
			}
		}
		var out []string
		for _, m := range kubeproxy.Registered() {
			if !named[string(m.Mode)] {
				out = append(out, prefix+string(m.Mode)+"\t"+m.Summary)
			}
		}
		d := cobra.ShellCompDirectiveNoFileComp
		if list {
			d |= cobra.ShellCompDirectiveNoSpace // a list goes on after a comma
		}
		return out, d
	}
}

func runScenario(cmd *cobra.Command, file string, o *runOptions) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if len(o.modes) > 0 && o.mode != "" {
		return badInput(errors.New("--mode and --modes: give one"))
	}
	if len(o.modes) > 0 && len(o.versions) > 0 {
		return badInput(errors.New("--modes and --versions: give one (compare modes at one version, or versions in one mode)"))
	}
	if err := checkModeFlag("--modes", o.modes...); err != nil {
		return err
	}
	if err := checkModeFlag("--mode", o.mode); err != nil {
		return err
	}
	switch o.backend {
	case "sim", "":
	case "kernel", "both":
		if len(o.modes) > 0 || len(o.versions) > 0 {
			return badInput(fmt.Errorf("--backend %s and --modes/--versions: give one (compare back ends in one mode and version)", o.backend))
		}
	default:
		return badInput(fmt.Errorf("--backend %q: want sim, kernel or both", o.backend))
	}
	if o.iptables != "nft" && o.iptables != "legacy" {
		return badInput(fmt.Errorf("--kernel-iptables %q: want nft or legacy", o.iptables))
	}
	if o.keep != "" && o.backend != "both" {
		return badInput(errors.New("--keep: only with --backend both"))
	}
	s, err := scenario.Load(file)
	if err != nil {
		return badInput(err)
	}
	if o.backend == "kernel" || o.backend == "both" {
		return runKernel(cmd, s, o)
	}
	opts := scenario.Options{Mode: o.mode}
	prog := newProgress(cmd.ErrOrStderr(), o.progress)
	opts.Progress = prog.step
	out := cmd.OutOrStdout()
	ctx := cmdContext(cmd)
	if len(o.modes) > 0 || len(o.versions) > 0 {
		var cmp *scenario.Comparison
		if len(o.modes) > 0 {
			cmp, err = scenario.RunModes(ctx, s, o.modes, opts)
		} else {
			cmp, err = scenario.RunVersions(ctx, s, o.versions, opts)
		}
		prog.done()
		if err != nil {
			return scenarioErr(err)
		}
		if err := writeResult(out, o.output, cmp.JSON, cmp.WriteText); err != nil {
			return err
		}
		if !cmp.Passed {
			if len(o.versions) > 0 {
				return errors.New("scenario failed under at least one version")
			}
			return errors.New("scenario failed under at least one mode")
		}
		return nil
	}
	rep, err := scenario.Run(ctx, s, opts)
	prog.done()
	if err != nil {
		return scenarioErr(err)
	}
	if err := writeResult(out, o.output, rep.JSON, rep.WriteText); err != nil {
		return err
	}
	if !rep.Passed {
		return fmt.Errorf("scenario failed: %d of %d steps", rep.Failed, len(rep.Steps))
	}
	return nil
}

// checkModeFlag checks the kube-proxy modes a flag names ("" is no mode): an unknown
// one, or one listed twice, is a usage error about the flag, not about the scenario.
func checkModeFlag(flag string, modes ...string) error {
	have := scenario.AvailableModes()
	seen := map[string]bool{}
	for _, m := range modes {
		if m == "" && flag == "--mode" {
			continue
		}
		if !slices.Contains(have, m) {
			return badInput(fmt.Errorf("%s: unknown kube-proxy mode %q: this build has %s", flag, m, strings.Join(have, ", ")))
		}
		if seen[m] {
			return badInput(fmt.Errorf("%s: mode %q is listed twice", flag, m))
		}
		seen[m] = true
	}
	return nil
}

func scenarioErr(err error) error {
	if scenario.IsInputError(err) {
		return badInput(err)
	}
	return err
}

func writeResult(w io.Writer, output string, js func() ([]byte, error), text func(io.Writer) error) error {
	if structured(output) {
		b, err := js()
		if err != nil {
			return err
		}
		return writeStructured(w, output, b)
	}
	return text(w)
}

// progress prints "[3/8] title" on one line of stderr, when stderr is a terminal or
// --progress asks for it.
type progress struct {
	w       io.Writer
	enabled bool
	width   int
}

func newProgress(w io.Writer, force bool) *progress {
	p := &progress{w: w, enabled: force}
	if f, ok := w.(*os.File); ok && !force {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.enabled = true
		}
	}
	return p
}

func (p *progress) step(i, total int, title string) {
	if !p.enabled {
		return
	}
	line := fmt.Sprintf("[%d/%d] %s", i, total, title)
	if r := []rune(line); len(r) > 100 { // cut whole characters, not bytes
		line = string(r[:97]) + "..."
	}
	width := utf8.RuneCountInString(line)
	pad := ""
	if n := p.width - width; n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
	p.width = width
}

func (p *progress) done() {
	if p.enabled && p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
		p.width = 0
	}
}
