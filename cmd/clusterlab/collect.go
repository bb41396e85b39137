package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/clusterlab/clusterlab/nodebundle"
)

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "collect",
		Short: "Print the shell script that gathers a node's networking state for `trace --node`",
		Long: `Print a POSIX shell script that gathers one node's networking state into a directory
(and a .tar.gz of it), for clusterlab trace --node: iptables-save and ip6tables-save with
counters, nft list ruleset, ipset save, ipvsadm -Sn and -Ln --stats, conntrack -L and -S,
ip -j addr, route, link (-d: bridge ports' hairpin modes) and neigh, bridge -j fdb
(which port each pod's MAC is behind), the sysctls that decide what rules alone cannot
(route_localnet, ip_forward, rp_filter, bridge-nf-call-iptables, conntrack and IPVS
ones), the kernel release and kube-proxy's version and /configz. It only reads; a tool
that is missing or fails leaves FILE.err saying so. Run it as root on the node, or in a
node debug pod with the host's root.`,
		Example: `  clusterlab collect > collect.sh && sudo sh collect.sh /tmp/node-a
  kubectl debug node/node-a -it --image=nicolaka/netshoot -- chroot /host sh -c "$(clusterlab collect)"
  clusterlab trace --node /tmp/node-a --src 10.244.3.9 --dst 10.96.0.50 --dport 8125 --proto udp`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), nodebundle.CollectScript)
			return err
		},
	})
}

// read returns a dump's text: from the --node bundle, or from the file.
func (o *traceOptions) read(name string) ([]byte, error) {
	if data, ok := o.bundle[name]; ok {
		return data, nil
	}
	return os.ReadFile(name)
}

// useBundle takes the trace's inputs from the --node bundle: the ruleset (nftables when
// the node's kube-proxy is in the nftables mode, else iptables-save of the packet's
// family), the ipsets, the node's addresses, its interfaces' primary addresses and the
// output interface its routes pick; flags given explicitly win. It says on stderr what
// it took and what it had to do without.
func (o *traceOptions) useBundle(cmd *cobra.Command) error {
	for _, f := range []string{"iptables-save", "nft-ruleset", "ipsets"} {
		if cmd.Flags().Changed(f) {
			return badInput(fmt.Errorf("--%s and --node: the bundle has it", f))
		}
	}
	b, err := nodebundle.Load(o.node)
	if err != nil {
		return badInput(err)
	}
	dst, err := netip.ParseAddr(o.dst)
	if err != nil {
		return badInput(fmt.Errorf("--dst %q: want an IP address", o.dst))
	}
	ipv6 := dst.Unmap().Is6()
	stderr := cmd.ErrOrStderr()
	say := func(format string, args ...any) {
		fmt.Fprintf(stderr, "clusterlab: node bundle: "+format+"\n", args...)
	}
	o.bundle = map[string][]byte{}
	name := func(f string) string { return filepath.Join(o.node, f) }
	ipt := nodebundle.IPTablesSave
	if ipv6 {
		ipt = nodebundle.IP6TablesSave
	}
	iptData, haveIPT := b.File(ipt)
	nftData, haveNFT := b.File(nodebundle.NFTRuleset)
	haveIPT = haveIPT && len(strings.TrimSpace(string(iptData))) > 0
	iptRules := haveIPT && hasIPTablesRules(iptData)
	own := nftOwnTables(nftData, iptData, ipv6)
	useIPT := func() {
		o.iptablesSave, o.bundle[name(ipt)] = name(ipt), iptData
		if sets, ok := b.File(nodebundle.IPSetSave); ok {
			o.ipsets, o.bundle[name(nodebundle.IPSetSave)] = name(nodebundle.IPSetSave), sets
		} else if strings.Contains(string(iptData), "--match-set") {
			say("no %s (%s): set matches are assumptions", nodebundle.IPSetSave, b.Missing(nodebundle.IPSetSave))
		}
	}
	useNFT := func() { o.nftRuleset, o.bundle[name(nodebundle.NFTRuleset)] = name(nodebundle.NFTRuleset), nftData }
	switch {
	case iptRules && len(own) > 0:
		useIPT()
		useNFT()
		say("tracing %s and %s (tables %s) together: at each hook iptables' tables and nftables' base chains by priority", ipt, nodebundle.NFTRuleset, strings.Join(own, ", "))
	case len(own) > 0:
		useNFT()
		if haveIPT {
			say("tracing %s (%s holds no rules)", nodebundle.NFTRuleset, ipt)
		} else {
			say("tracing %s (no %s: %s)", nodebundle.NFTRuleset, ipt, b.Missing(ipt))
		}
	case haveIPT:
		useIPT()
		say("tracing %s", ipt)
		if haveNFT && strings.Contains(string(nftData), "table ") {
			say("%s holds only iptables-nft's copies of its tables", nodebundle.NFTRuleset)
		}
		if ipvs, ok := b.File(nodebundle.IPVSSave); ok && len(strings.TrimSpace(string(ipvs))) > 0 && !cmd.Flags().Changed("ipvs-save") {
			o.ipvsSave, o.bundle[name(nodebundle.IPVSSave)] = name(nodebundle.IPVSSave), ipvs
			say("IPVS virtual services from %s", nodebundle.IPVSSave)
		}
	case haveNFT:
		useNFT()
		say("tracing %s (no %s: %s)", nodebundle.NFTRuleset, ipt, b.Missing(ipt))
	default:
		return badInput(fmt.Errorf("node bundle %s: neither %s (%s) nor %s (%s)", o.node, ipt, b.Missing(ipt), nodebundle.NFTRuleset, b.Missing(nodebundle.NFTRuleset)))
	}
	if ct, ok := b.File(nodebundle.ConntrackList); ok && !cmd.Flags().Changed("conntrack") {
		o.conntrack, o.bundle[name(nodebundle.ConntrackList)] = name(nodebundle.ConntrackList), ct
	}
	if len(b.Ifaces) == 0 {
		say("no addresses (%s: %s): give --local-ips and --iface-addr", nodebundle.IPAddr, b.Missing(nodebundle.IPAddr))
	} else {
		if !cmd.Flags().Changed("local-ips") {
			for _, a := range b.LocalAddrs() {
				o.localIPs = append(o.localIPs, a.String())
			}
		}
		if !cmd.Flags().Changed("iface-addr") {
			for iface, a := range b.PrimaryAddrs(ipv6) {
				o.ifaceAddrs = append(o.ifaceAddrs, iface+"="+a.String())
			}
		}
	}
	if !cmd.Flags().Changed("out-interface") {
		if b.Routes == nil {
			say("no routes (%s: %s): the output interface is unknown", nodebundle.IPRoute, b.Missing(nodebundle.IPRoute))
		} else {
			if dev, rt := b.OutIface(dst.Unmap()); dev != "" {
				o.outIface = dev // the nftables trace's, before DNAT
				via := ""
				if rt.Gateway.IsValid() {
					via = " via " + rt.Gateway.String()
				}
				say("routes from %s: %s leaves by %s (route %s%s); a DNATed packet by its new destination's route", nodebundle.IPRoute, dst, dev, rt.Dst, via)
			}
			o.route = func(d netip.Addr) string { dev, _ := b.OutIface(d.Unmap()); return dev }
		}
	}
	if v, ok := b.Sysctls["net.ipv4.conf.all.route_localnet"]; ok && !cmd.Flags().Changed("route-localnet") {
		on := v == "1"
		o.routeLocalnet = &on
		say("net.ipv4.conf.all.route_localnet = %s: applied to packets to or from loopback addresses", v)
	}
	if o.iptablesSave != "" {
		o.useBundleBridge(cmd, b, say)
	} else if src, err := netip.ParseAddr(o.src); err == nil {
		if dev, _ := b.OutIface(src.Unmap()); dev != "" {
			if l, ok := b.Link(dev); ok && l.Kind == "bridge" {
				say("%s is on bridge %s: the nftables trace does not model the bridge (hairpin mode, bridge-nf-call-iptables) yet", src, dev)
			}
		}
	}
	return nil
}

// hasIPTablesRules reports whether an iptables-save dump holds a rule or a built-in
// chain policy other than ACCEPT: whether its tables do anything to a packet.
func hasIPTablesRules(dump []byte) bool {
	for _, line := range strings.Split(string(dump), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "-A ") || strings.HasPrefix(line, "-I ") {
			return true
		}
		if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(line, ":") && f[1] != "ACCEPT" && f[1] != "-" {
			return true
		}
	}
	return false
}

// nftOwnTables lists the tables of an nft listing that a packet of the family sees
// (ip or ip6, and inet) other than iptables-nft's copies of the iptables dump's tables
// (a table of an iptables table's name that the dump holds too).
func nftOwnTables(nft, iptDump []byte, ipv6 bool) []string {
	fam := map[bool]string{false: "ip", true: "ip6"}[ipv6]
	var out []string
	for _, line := range strings.Split(string(nft), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "table" {
			continue
		}
		switch {
		case f[1] == "inet":
		case f[1] == fam:
			switch f[2] {
			case "raw", "mangle", "nat", "filter", "security":
				if strings.Contains(string(iptDump), "\n*"+f[2]+"\n") || strings.HasPrefix(string(iptDump), "*"+f[2]+"\n") {
					continue
				}
			}
		default:
			continue
		}
		out = append(out, f[1]+" "+f[2])
	}
	return out
}
