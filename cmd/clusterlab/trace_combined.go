package main

import (
	"fmt"
	"strings"

	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/proxy/nodewalk"

	"github.com/spf13/cobra"
)

// runCombinedTrace is `clusterlab trace --iptables-save X --nft-ruleset Y` (or a --node
// bundle with both): the packet through the iptables tables and the nftables base
// chains together, at each hook by priority (proxy/nodewalk).
func runCombinedTrace(cmd *cobra.Command, o *traceOptions) error {
	for _, r := range []struct{ flag, why string }{
		{"lenient", "an nft ruleset is loaded whole; give the iptables dump alone to trace it leniently"},
		{"ipvs-save", "the combined walk does not hand packets to IPVS"},
		{"every-rule", "the combined walk lists every rule of the nft chains and the iptables index's candidates"},
	} {
		if cmd.Flags().Changed(r.flag) {
			return badInput(fmt.Errorf("--%s: not with both --iptables-save and --nft-ruleset (%s)", r.flag, r.why))
		}
	}
	for _, f := range bridgeTraceFlags {
		if cmd.Flags().Changed(f) {
			return badInput(fmt.Errorf("--%s: not with both --iptables-save and --nft-ruleset (the combined walk does not model the bridge yet)", f))
		}
	}
	in, err := o.walkInput()
	if err != nil {
		return badInput(err)
	}
	if in.Bridge != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "clusterlab: the source is on bridge %s: the combined walk does not model the bridge (hairpin mode, bridge-nf-call-iptables) yet\n", in.Bridge.Name)
	}
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if o.conntrack != "" {
		if err := o.connBinding(cmd, &in); err != nil {
			return badInput(err)
		}
	}
	ipt, err := o.loadIPTables(cmd, emulator.FamilyOf(in.Packet.Dst))
	if err != nil {
		return err
	}
	nft, err := o.loadNFT()
	if err != nil {
		return err
	}
	node := &nodewalk.Node{IPTables: ipt, NFT: nft}
	if copies := nodewalk.IPTablesNFTCopies(ipt, nft); len(copies) > 0 {
		node.SkipNFT = map[string]bool{}
		for _, c := range copies {
			node.SkipNFT[c] = true
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "clusterlab: %s in %s are iptables-nft's tables, the rules of %s: traced from %s, their nft copies skipped\n",
			strings.Join(copies, ", "), o.nftRuleset, o.iptablesSave, o.iptablesSave)
	}
	res, err := nodewalk.Walk(node, nodewalk.Input{Packet: in.Packet, From: in.From, Local: in.Local, IfaceAddrs: in.IfaceAddrs,
		OutIface: in.OutIface, Route: in.Route, RouteLocalnet: in.RouteLocalnet, CtNAT: in.CtNAT, Conntrack: in.Conntrack,
		AllBranches: in.AllBranches, Seed: in.Seed})
	if err != nil {
		return badInput(err)
	}
	names := ""
	if len(o.manifests) > 0 {
		idx, err := loadNames(o.manifests)
		if err != nil {
			return badInput(fmt.Errorf("--manifests: %w", err))
		}
		all := map[string]string{}
		for _, oc := range res.Outcomes {
			texts := []string{in.Packet.Src.String(), in.Packet.Dst.String(), oc.Packet}
			if oc.DNATDestination != nil {
				texts = append(texts, *oc.DNATDestination)
			}
			if oc.SNATSource != nil {
				texts = append(texts, *oc.SNATSource)
			}
			oc.Names = idx.of(texts...)
			for a, n := range oc.Names {
				all[a] = n
			}
		}
		names = namesListText(all)
	}
	out := cmd.OutOrStdout()
	if structured(o.output) {
		b, err := res.JSON()
		if err != nil {
			return err
		}
		return writeStructured(out, o.output, b)
	}
	_, err = fmt.Fprint(out, res.Text()+names)
	return err
}
