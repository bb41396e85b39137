package main

import (
	"fmt"

	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	nftemu "github.com/clusterlab/clusterlab/proxy/nftables/emulator"

	"github.com/spf13/cobra"
)

// runNFTTrace is `clusterlab trace --nft-ruleset FILE`: the same packet flags and the
// same outcome JSON as --iptables-save, through an nftables ruleset.
func runNFTTrace(cmd *cobra.Command, o *traceOptions) error {
	if o.ipsets != "" {
		return badInput(fmt.Errorf("--ipsets: only with --iptables-save (nftables sets are in the ruleset)"))
	}
	if o.lenient {
		return badInput(fmt.Errorf("--lenient: only with --iptables-save (an nft ruleset is loaded whole, as nft -f does)"))
	}
	if o.ipvsSave != "" {
		return badInput(fmt.Errorf("--ipvs-save: only with --iptables-save (kube-proxy's IPVS mode programs iptables)"))
	}
	for _, f := range bridgeTraceFlags {
		if cmd.Flags().Changed(f) {
			return badInput(fmt.Errorf("--%s: only with --iptables-save (the nftables trace does not model the bridge yet)", f))
		}
	}
	if cmd.Flags().Changed("every-rule") {
		return badInput(fmt.Errorf("--every-rule: only with --iptables-save (an nft trace lists every rule it looks at)"))
	}
	in, err := o.walkInput()
	if err != nil {
		return badInput(err)
	}
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if o.conntrack != "" {
		if err := o.connBinding(cmd, &in); err != nil {
			return badInput(err)
		}
	}
	e, err := o.loadNFT()
	if err != nil {
		return err
	}
	res, err := e.Walk(nftWalkInput(in))
	if err != nil {
		return badInput(err)
	}
	out := cmd.OutOrStdout()
	if structured(o.output) {
		b, err := res.JSON()
		if err != nil {
			return err
		}
		return writeStructured(out, o.output, b)
	}
	_, err = fmt.Fprint(out, res.Text())
	return err
}

// loadNFT loads --nft-ruleset.
func (o *traceOptions) loadNFT() (*nftemu.Emulator, error) {
	data, err := o.read(o.nftRuleset)
	if err != nil {
		return nil, badInput(fmt.Errorf("--nft-ruleset: %w", err))
	}
	e, err := nftemu.Load(data, o.nftRuleset)
	if err != nil {
		return nil, badInput(err)
	}
	if len(e.Ruleset().Tables) == 0 {
		return nil, badInput(fmt.Errorf("no tables in %s: want `nft list ruleset` output (table FAMILY NAME { ... })", o.nftRuleset))
	}
	return e, nil
}

// nftWalkInput converts the packet flags' walk input to the nftables walk's.
func nftWalkInput(in emulator.WalkInput) nftemu.WalkInput {
	p := in.Packet
	from := map[emulator.From]nftemu.From{emulator.FromAuto: nftemu.FromAuto, emulator.FromPod: nftemu.FromPod,
		emulator.FromNode: nftemu.FromNode, emulator.FromExternal: nftemu.FromExternal}[in.From]
	out := nftemu.WalkInput{
		Packet: nftemu.Packet{Proto: p.Proto, Src: p.Src, Dst: p.Dst, SrcPort: p.SrcPort, DstPort: p.DstPort,
			TCPFlags: p.TCPFlags, ICMPType: p.ICMPType, ICMPCode: p.ICMPCode, TTL: p.TTL, Len: p.Len, InIface: p.InIface},
		From: from, Local: in.Local, AllBranches: in.AllBranches, Seed: in.Seed, OutIface: in.OutIface,
		Route: in.Route, IfaceAddrs: in.IfaceAddrs, RouteLocalnet: in.RouteLocalnet, CtNAT: in.CtNAT,
	}
	if ct := in.Conntrack; ct != nil {
		out.Conntrack = &nftemu.Conntrack{State: ct.State, Status: ct.Status, Reply: ct.Reply, Orig: ct.Orig,
			ReplyTuple: ct.ReplyTuple, Mark: ct.Mark, Expire: ct.Expire}
	}
	return out
}
