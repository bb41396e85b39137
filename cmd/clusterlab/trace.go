package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"

	"github.com/spf13/cobra"
)

// traceOptions are the flags of `clusterlab trace`. The packet flags are shared by every
// source of rules; today the rules come from an iptables-save dump (--iptables-save),
// and other sources (scenario files) can be added as further flags without changing
// these.
type traceOptions struct {
	iptablesSave  string
	ipsets        string
	lenient       bool
	ifaceAddrs    []string
	node          string
	ipvsSave      string
	manifests     []string
	routeLocalnet *bool            // the node's route_localnet, when known (--route-localnet, a bundle)
	conntrack     string           // `conntrack -L` output: the NAT bindings of existing connections
	hairpin       *bool            // --hairpin: the pod's bridge port's hairpin mode
	brNFCall      *bool            // --bridge-nf-call-iptables
	bridge        *emulator.Bridge // the --node bundle's bridge the packet's source is on
	// bridgeFallback is the bridge device the source's route names when the bundle
	// does not say what it is: modelled only with --hairpin or --bridge-nf-call-iptables.
	bridgeFallback *emulator.Bridge
	route          func(netip.Addr) string // the --node bundle's routing table
	// bundle holds the files of --node by the names the dump flags are set to.
	bundle     map[string][]byte
	nftRuleset string

	src, dst     string
	sport, dport int
	proto        string
	localIPs     []string
	from         string
	inIface      string
	outIface     string
	allBranches  bool
	everyRule    bool
	seed         uint64
	output       string

	// A packet of an existing connection or an ICMP message (trace_packet.go).
	icmpType string
	icmpCode int
	ctstate  string
	reply    bool
	sportSet bool // --sport given (not for ICMP)
}

const traceLong = `Trace the first packet of a connection (or a later one: --ctstate, --reply) through a
node's iptables rules (--iptables-save, an iptables-save dump) or nftables rules
(--nft-ruleset: the output of
` + "`nft list ruleset`" + ` with or without -a, of ` + "`nft -j list ruleset`" + `, or an ` + "`nft -f`" + `
script), rule by rule, as the kernel would. With iptables: raw, mangle, nat, filter and
security tables at each hook. With nftables: the base chains of every ip, ip6 and inet
table at each hook in priority order (an accept ends only its base chain; nat chains
run until one translates); numgen random choices are the choice points, and
expressions the emulator does not model (icmp type, limit, meta skuid, ...) are
assumptions as below (queue, tproxy: verdict UNKNOWN). Give both, for a node with
iptables rules (Docker, Calico, flannel) beside kube-proxy's nftables table, and the
packet goes through both at each hook by priority: iptables' tables at theirs (raw
-300, mangle -150, nat -100 and +100, filter 0, security 50), nft base chains at theirs
(nft first on a tie); an accept goes on to the next, drop and reject end the packet,
the first nat chain or table that translates binds the connection (later ones at that
hook do not run). The rules of iptables-nft's tables (table ip filter, ip nat, ... in
the nft listing) are read from the iptables dump and their nft copies skipped; rules
and decisions name their source ("iptables" or "nft"). Not with both: --lenient,
--ipvs-save, --every-rule. --node picks both when its iptables dump has rules and its
nft listing a table of its own.

The packet enters at PREROUTING, or at OUTPUT when it comes from the node (--from node,
or its source is one of --local-ips). After nat PREROUTING a local destination goes to
INPUT (delivered locally), any other through FORWARD and POSTROUTING; after OUTPUT it
goes through POSTROUTING and, when its destination is local, back in to INPUT.
statistic --mode random rules are choice points: by default one branch is drawn (from
--seed); --all-branches follows every branch and lists every outcome with its
probability, merging identical ones. Long chains are looked up through an index (the
rules it shows cannot match are skipped, and the trace says how many); --every-rule
scans them rule by rule as the kernel does and lists every rule. Match modules the
emulator does not model (physdev, limit, owner, ...) are assumed not to match; with
--all-branches both possibilities are followed and each outcome lists its assumptions.

Output -o json is a JSON array of outcomes, each an object with:
  probability       number: the outcome's probability. With assumptions it is
                    conditional on them: the probability of this outcome if the
                    unmodelled matches do what its assumptions say. Both branches of
                    an assumption count in full, so with assumptions the outcomes'
                    probabilities can sum to more than 1
  verdict           "ACCEPT" (left the node), "LOCAL" (delivered locally), "DROP",
                    "REJECT", or "UNKNOWN": a target the emulator does not model
                    (NFQUEUE, TPROXY, ...) decided, so the packet's fate is not known
  reject_with       the REJECT type, e.g. "icmp-port-unreachable" (REJECT only)
  decided_by        "rule" or "policy": what made the final filtering decision;
                    "routing" (a martian, --route-localnet) or "bridge" (see below)
  decision          {hook, table, chain, line, rule} of that rule, or {hook, table, chain,
                    policy}; null when no filter rule or policy was involved
  dnat_destination  "ip:port" a DNAT or REDIRECT translated to, or null
  masqueraded       true when MASQUERADE or SNAT translated the source
  snat_source       the SNAT source address ("ip" or "ip:ports"), null for MASQUERADE
  mark              the packet mark at the end, in hex
  packet            the packet at the end, after translations
  hooks             the hooks the packet went through, in order
  matched_rules     [{hook, table, chain, line, rule}]: the rules that matched, in order
                    (line = the rule's line in the dump; rule = its text). With
                    --nft-ruleset: table is "FAMILY NAME" ("ip kube-proxy"), handle is
                    the rule's handle (when the dump has them, nft -a) and element the
                    set or map element that matched (when one did); decision likewise.
                    With both: source ("iptables" or "nft") on each rule and decision
  assumptions       [{hook, table, chain, line, rule, match, assumed_match}] (if any)
  paths             how many paths were merged into this outcome`

func init() { rootCmd.AddCommand(newTraceCmd()) }

// newTraceCmd builds the trace command (a fresh one per call, so tests get clean flags).
func newTraceCmd() *cobra.Command {
	var o traceOptions
	var so scenarioTraceOptions // the scenario mode's flags (trace_scenario.go)
	cmd := &cobra.Command{
		Use:   "trace (--iptables-save FILE | --nft-ruleset FILE | both | --node DIR) --src IP --dst IP --dport N | SCENARIO --from pod:NS/NAME --to NAME_OR_VIP[:PORT]) [flags]",
		Short: "Trace a packet through an iptables-save dump, an nft ruleset or a scenario's cluster, rule by rule",
		Long:  traceLong + tracePacketLong + traceBridgeLong + traceScenarioLong,
		Example: `  clusterlab trace --iptables-save node1.txt --src 10.244.3.9 --dst 10.96.0.50 --dport 8125 --proto udp --all-branches
  clusterlab trace --iptables-save node1.txt --src 192.168.1.10 --dst 10.96.0.1 --dport 443 --local-ips 192.168.1.10 -o json
  clusterlab trace --nft-ruleset node1.nft --src 10.244.3.9 --dst 10.96.0.50 --dport 8125 --proto udp --local-ips 192.168.1.10 --all-branches
  clusterlab trace --iptables-save node1.iptables --nft-ruleset node1.nft --src 10.244.3.9 --dst 10.96.0.50 --dport 80 --in-interface cbr0` + traceScenarioExamples,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return runScenarioTrace(cmd, args[0], &o, &so)
			}
			if c := changed(cmd, scenarioTraceFlags); len(c) > 0 {
				return badInput(fmt.Errorf("%s: only for tracing a scenario (give the scenario file as the argument)", strings.Join(c, ", ")))
			}
			o.sportSet = cmd.Flags().Changed("sport")
			// What a --node bundle set up is not a flag: clear it, so a command run
			// again in the same process (the tests) starts from its flags alone.
			o.route, o.bundle = nil, nil
			return runTrace(cmd, &o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.iptablesSave, "iptables-save", "", "iptables-save (or ip6tables-save) output to trace through, with or without -c counters")
	f.StringVar(&o.ipsets, "ipsets", "", "`ipset save` or `ipset list` output for -m set rules (optional)")
	f.StringArrayVar(&o.ifaceAddrs, "iface-addr", nil, "IFACE=ADDR: an interface's primary address (repeatable): MASQUERADE out of it takes ADDR, REDIRECT in through it too; the address is local")
	f.BoolVar(&o.lenient, "lenient", false, "skip the lines of --iptables-save that do not load (reported on stderr) instead of refusing the dump; outcomes whose path crossed a chain that lost a line say so")
	f.StringVar(&o.node, "node", "", "a node bundle (the directory or .tar.gz `clusterlab collect` writes): its iptables-save or nft ruleset, ipsets, addresses and routes, instead of --iptables-save/--nft-ruleset, --ipsets, --local-ips, --iface-addr and --out-interface")
	f.Var(&optBool{p: &o.routeLocalnet}, "route-localnet", "the node's net.ipv4.conf.all.route_localnet (true or false): false drops, as the kernel's routing does, a packet from another interface to or from a loopback address (a NodePort on 127.0.0.1); not given: not checked (a --node bundle's sysctl applies)")
	f.StringVar(&o.conntrack, "conntrack", "", "the node's `conntrack -L` output: a packet of an existing connection (--ctstate ESTABLISHED) gets its connection's NAT binding, a --reply packet (found by the entry's reply tuple) its inverse (a --node bundle's applies)")
	f.StringSliceVar(&o.manifests, "manifests", nil, "the cluster's manifests (a `kubectl get -A -o yaml`, files or directories): the outcomes name the Services, Pods and nodes behind their addresses")
	f.StringVar(&o.ipvsSave, "ipvs-save", "", "an IPVS-mode node's `ipvsadm -Sn` output: a packet delivered to a virtual service goes on to the real server its scheduler picks, through OUTPUT and POSTROUTING")
	f.StringVar(&o.nftRuleset, "nft-ruleset", "", "`nft list ruleset` output (with or without -a; or nft -j JSON, or an nft -f script) to trace through; with --iptables-save too, both by priority")
	f.StringVar(&o.src, "src", "", "source IP address")
	f.StringVar(&o.dst, "dst", "", "destination IP address")
	f.IntVar(&o.dport, "dport", 0, "destination port")
	f.IntVar(&o.sport, "sport", 40000, "source port")
	f.StringVar(&o.proto, "proto", "tcp", "protocol: tcp, udp, sctp or icmp (ICMPv6 for IPv6 addresses; with --icmp-type)")
	f.StringSliceVar(&o.localIPs, "local-ips", nil, "the node's own IP addresses (addrtype LOCAL, local delivery), comma-separated")
	f.StringVar(&o.from, "from", "", "where the packet comes from: pod, node or external (default: node if --src is local, else from outside); with a scenario: pod:NS/NAME, node:NAME or external:NAME")
	f.StringVar(&o.inIface, "in-interface", "", "input interface the packet arrives on (for -i rules; none by default)")
	f.StringVar(&o.outIface, "out-interface", "", "output interface routing picks for a packet that leaves the node (for -o rules; none by default)")
	f.BoolVar(&o.allBranches, "all-branches", false, "follow every statistic branch and list every outcome with its probability")
	f.BoolVar(&o.everyRule, "every-rule", false, "list every rule looked at, scanning long chains rule by rule as the kernel does (by default rules a chain index shows cannot match are skipped, and a line says how many)")
	f.Uint64Var(&o.seed, "seed", 1, "seed for the choice points when not following all branches")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text, json or yaml")
	addPacketTraceFlags(f, &o)
	addBridgeTraceFlags(f, &o)
	addScenarioTraceFlags(f, &so)
	return cmd
}

func runTrace(cmd *cobra.Command, o *traceOptions) error {
	o.bridge, o.bridgeFallback = nil, nil // a bundle's, of this run only
	if o.node != "" {
		if err := o.useBundle(cmd); err != nil {
			return err
		}
	}
	if o.iptablesSave != "" && o.nftRuleset != "" {
		return runCombinedTrace(cmd, o)
	}
	if o.nftRuleset != "" {
		return runNFTTrace(cmd, o)
	}
	if o.iptablesSave == "" {
		return badInput(errors.New("--iptables-save is required (or --nft-ruleset for an nftables ruleset)"))
	}
	in, err := o.walkInput()
	if err != nil {
		return badInput(err)
	}
	if err := checkOutput(o.output); err != nil {
		return err
	}
	e, err := o.loadIPTables(cmd, emulator.FamilyOf(in.Packet.Dst))
	if err != nil {
		return err
	}
	if o.conntrack != "" {
		if err := o.connBinding(cmd, &in); err != nil {
			return badInput(err)
		}
	}
	res, err := e.Walk(in)
	if err != nil {
		return badInput(err)
	}
	if o.ipvsSave != "" {
		data, err := o.read(o.ipvsSave)
		if err != nil {
			return badInput(fmt.Errorf("--ipvs-save: %w", err))
		}
		notes, err := followIPVS(e, res, in, data, o.ipvsSave)
		if err != nil {
			return badInput(err)
		}
		for _, n := range notes {
			fmt.Fprintln(cmd.ErrOrStderr(), "clusterlab: "+n)
		}
	}
	names := ""
	if len(o.manifests) > 0 {
		idx, err := loadNames(o.manifests)
		if err != nil {
			return badInput(fmt.Errorf("--manifests: %w", err))
		}
		nameOutcomes(res.Outcomes, in, idx)
		names = namesText(res.Outcomes)
	}
	out := cmd.OutOrStdout()
	if structured(o.output) {
		b, err := res.JSON()
		if err != nil {
			return err
		}
		return writeStructured(out, o.output, b)
	}
	_, err = fmt.Fprint(out, res.Text()+ipvsText(res)+names)
	return err
}

// loadIPTables loads --iptables-save (with --ipsets, --lenient) for packets of family
// fam; the lines a lenient load skipped are reported on stderr.
func (o *traceOptions) loadIPTables(cmd *cobra.Command, fam emulator.Family) (*emulator.Emulator, error) {
	data, err := o.read(o.iptablesSave)
	if err != nil {
		return nil, badInput(fmt.Errorf("--iptables-save: %w", err))
	}
	var opts []emulator.Option
	if o.ipsets != "" {
		sets, err := o.read(o.ipsets)
		if err != nil {
			return nil, badInput(fmt.Errorf("--ipsets: %w", err))
		}
		s, err := emulator.ParseIPSets(sets, o.ipsets)
		if err != nil {
			return nil, badInput(err)
		}
		opts = append(opts, emulator.WithIPSets(s))
	}
	if err := o.checkDumpFamily(data, fam); err != nil {
		return nil, badInput(err)
	}
	if o.lenient {
		opts = append(opts, emulator.Lenient())
	}
	e, err := emulator.Load(data, fam, o.iptablesSave, opts...)
	if err != nil {
		return nil, badInput(o.familyMismatch(data, fam, err))
	}
	for _, sl := range e.Skipped() {
		text := ""
		if sl.Text != "" {
			text = " " + strconv.Quote(sl.Text)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "clusterlab: skipped %s:%d%s: %s\n", sl.File, sl.Line, text, sl.Reason)
	}
	if len(e.Ruleset().Tables) == 0 {
		return nil, badInput(fmt.Errorf("no tables in %s: want iptables-save output (a *TABLE line, its chains and rules, COMMIT)", o.iptablesSave))
	}
	return e, nil
}

// familyNames names a family as the tools that save it do.
var familyNames = map[emulator.Family]string{emulator.IPv4: "IPv4 (iptables-save)", emulator.IPv6: "IPv6 (ip6tables-save)"}

// dumpMismatch is the error for a dump of family dump traced with addresses of family fam.
func (o *traceOptions) dumpMismatch(dump, fam emulator.Family, how string) error {
	return fmt.Errorf("%s is an %s dump (%s), but --src %s and --dst %s are %s addresses: trace %s addresses through it, or give the node's %s dump",
		o.iptablesSave, familyNames[dump], how, o.src, o.dst, fam, dump, familyNames[fam])
}

// checkDumpFamily compares the family the dump's "# Generated by ip(6)tables-save"
// header names, if it has one, with the packet's.
func (o *traceOptions) checkDumpFamily(data []byte, fam emulator.Family) error {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if line[0] != '#' {
			return nil // the header comes before the first table
		}
		// "# Generated by ip6tables-save v1.8.9 on ...", "# Generated by
		// iptables-nft-save v1.8.9 (nf_tables) on ...", ...
		f := strings.Fields(string(line))
		if len(f) < 4 || f[1] != "Generated" || f[2] != "by" {
			continue
		}
		var dump emulator.Family
		switch prog := f[3]; {
		case strings.HasPrefix(prog, "ip6tables"):
			dump = emulator.IPv6
		case strings.HasPrefix(prog, "iptables"):
			dump = emulator.IPv4
		default:
			continue
		}
		if dump != fam {
			return o.dumpMismatch(dump, fam, "its header names "+f[3])
		}
		return nil
	}
	return nil
}

// familyMismatch explains a dump that does not load for the packet's family: when it
// loads as the other family, that is the problem; otherwise err stands.
func (o *traceOptions) familyMismatch(data []byte, fam emulator.Family, err error) error {
	other := emulator.IPv6
	if fam == emulator.IPv6 {
		other = emulator.IPv4
	}
	if _, err2 := emulator.ParseDump(data, other, o.iptablesSave); err2 == nil {
		return o.dumpMismatch(other, fam, fmt.Sprintf("its rules load only as %s", other))
	}
	return err
}

func (o *traceOptions) walkInput() (emulator.WalkInput, error) {
	var in emulator.WalkInput
	src, err := netip.ParseAddr(o.src)
	if err != nil {
		return in, fmt.Errorf("--src %q: want an IP address", o.src)
	}
	dst, err := netip.ParseAddr(o.dst)
	if err != nil {
		return in, fmt.Errorf("--dst %q: want an IP address", o.dst)
	}
	src, dst = src.Unmap(), dst.Unmap()
	if src.Is4() != dst.Is4() {
		return in, fmt.Errorf("--src %s and --dst %s are of different IP families", src, dst)
	}
	proto, err := o.packetProto(src.Is6())
	if err != nil {
		return in, err
	}
	from, err := emulator.ParseFrom(o.from)
	if err != nil {
		return in, fmt.Errorf("--from: %w", err)
	}
	for _, s := range o.localIPs {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return in, fmt.Errorf("--local-ips %q: want IP addresses", s)
		}
		in.Local = append(in.Local, a.Unmap())
	}
	for _, s := range o.ifaceAddrs {
		name, addr, ok := strings.Cut(s, "=")
		a, err := netip.ParseAddr(strings.TrimSpace(addr))
		if !ok || strings.TrimSpace(name) == "" || err != nil {
			return in, fmt.Errorf("--iface-addr %q: want IFACE=ADDR, such as eth0=10.0.0.5", s)
		}
		if in.IfaceAddrs == nil {
			in.IfaceAddrs = map[string]netip.Addr{}
		}
		in.IfaceAddrs[strings.TrimSpace(name)] = a.Unmap()
		in.Local = append(in.Local, a.Unmap())
	}
	if from == emulator.FromNode {
		in.Local = append(in.Local, src)
	}
	p := emulator.Packet{Proto: proto, Src: src, Dst: dst, SrcPort: uint16(o.sport), DstPort: uint16(o.dport),
		TTL: 64, Len: 60, InIface: o.inIface}
	if err := o.packetState(&p, &in); err != nil {
		return in, err
	}
	in.Packet, in.From, in.AllBranches, in.Seed, in.OutIface, in.EveryRule = p, from, o.allBranches, o.seed, o.outIface, o.everyRule
	in.Route = o.route
	in.RouteLocalnet = o.routeLocalnet
	in.Bridge = o.bridgeModel()
	return in, nil
}

// optBool is a boolean flag that stays nil unless given.
type optBool struct{ p **bool }

func (b *optBool) String() string {
	if b.p == nil || *b.p == nil {
		return ""
	}
	return strconv.FormatBool(**b.p)
}
func (b *optBool) Type() string { return "bool" }
func (b *optBool) Set(s string) error {
	if s == "" {
		*b.p = nil
		return nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.p = &v
	return nil
}

// connBinding gives a packet of an existing connection (--ctstate ESTABLISHED or
// RELATED) the NAT binding of its entry in --conntrack. A packet in the original
// direction is found by the entry's original tuple: its destination gets the DNAT's
// address (after PREROUTING or OUTPUT), its source the SNAT's (after POSTROUTING). A
// reply (--reply) is found by the entry's reply tuple and gets the inverse: its
// destination the original source, where the connection was SNATed or masqueraded,
// and its source the original destination, where it was DNATed (the kernel's un-DNAT
// of a Service's reply).
func (o *traceOptions) connBinding(cmd *cobra.Command, in *emulator.WalkInput) error {
	if in.Conntrack == nil || in.Conntrack.State == netfilter.CtInvalid {
		return nil // a first packet (the rules decide) or an INVALID packet
	}
	data, err := o.read(o.conntrack)
	if err != nil {
		return fmt.Errorf("--conntrack: %w", err)
	}
	entries, err := kernel.ParseConntrack(data)
	if err != nil {
		return fmt.Errorf("--conntrack %s: %w", o.conntrack, err)
	}
	p := in.Packet
	reply := in.Conntrack.Reply
	for _, e := range entries {
		t := e.Orig
		if reply {
			t = e.Reply
		}
		if e.Protocol != p.Proto || t.Src != p.Src || t.Dst != p.Dst || t.SrcPort != p.SrcPort || t.DstPort != p.DstPort {
			continue
		}
		n := &emulator.CtNAT{Entry: "conntrack -L: " + e.String()}
		switch {
		case !reply && e.DNATed():
			n.DNAT = netip.AddrPortFrom(e.Reply.Src, e.Reply.SrcPort)
		case reply && e.SNATed():
			n.DNAT = netip.AddrPortFrom(e.Orig.Src, e.Orig.SrcPort)
		}
		switch {
		case !reply && e.SNATed():
			n.SNAT = netip.AddrPortFrom(e.Reply.Dst, e.Reply.DstPort)
		case reply && e.DNATed():
			n.SNAT = netip.AddrPortFrom(e.Orig.Dst, e.Orig.DstPort)
		}
		in.CtNAT = n
		orig := netfilter.Tuple{Proto: e.Protocol, Src: e.Orig.Src, Dst: e.Orig.Dst, SrcPort: e.Orig.SrcPort, DstPort: e.Orig.DstPort}
		rep := netfilter.Tuple{Proto: e.Protocol, Src: e.Reply.Src, Dst: e.Reply.Dst, SrcPort: e.Reply.SrcPort, DstPort: e.Reply.DstPort}
		in.Conntrack.Orig, in.Conntrack.ReplyTuple = orig, rep
		if e.DNATed() {
			in.Conntrack.Status |= netfilter.StatusDstNAT
		}
		if e.SNATed() {
			in.Conntrack.Status |= netfilter.StatusSrcNAT
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "clusterlab: the packet's connection in %s: %s\n", o.conntrack, e.String())
		return nil
	}
	dir := "tuple"
	if reply {
		dir = "tuple as its reply tuple"
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "clusterlab: no entry in %s has the packet's %s: its connection's NAT binding is not known\n", o.conntrack, dir)
	return nil
}
