package main

import (
	"fmt"
	"io"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/nftables"
)

type nftablesGenOptions struct {
	iptablesGenOptions // the manifest, node and family flags shared with generate iptables
	serviceCIDRs       []string
	version            string
	localhostNodePorts bool
}

const nftablesGenLong = `Print the nft -f input kube-proxy's nftables mode writes on its first (full) sync
for the Services and EndpointSlices in the manifests, as seen from one node: the table
"ip kube-proxy" (or "ip6") with its base chains, jump rules, fixed chains, the
cluster-ips, nodeport-ips and hairpin-connections sets, the service-ips,
service-nodeports, no-endpoint-* and firewall-ips verdict maps, the
service-/local-/external-/firewall-/endpoint- chains and the elements, in the order
kube-proxy's transaction has them (services in namespace/name/port order).

The node is described by flags, or by a Node object of that name in the manifests (its
zone label, InternalIP addresses and podCIDRs, unless flags say otherwise).
--nodeport-addresses defaults to "primary" in this mode, as in kube-proxy. The output
applies with nft -f to a host or network namespace without a kube-proxy table.
Services labelled service.kubernetes.io/service-proxy-name are left out, as kube-proxy
leaves them out (--service-proxy-name NAME: only those labelled NAME).

The manifests are taken as generate iptables takes them: a Service without a clusterIP
gets the address derived from its name, a selector Service without EndpointSlices in
the files gets those derived from the files' Pods, each said on stderr.`

func init() {
	o := &nftablesGenOptions{}
	cmd := &cobra.Command{
		Use:   "nftables -f MANIFESTS --node NAME [flags]",
		Short: "Print kube-proxy's nftables-mode ruleset for Services and EndpointSlices",
		Long:  nftablesGenLong,
		Example: `  clusterlab generate nftables -f cluster.yaml --node worker-1 --node-ip 192.168.0.2 --cluster-cidr 10.244.0.0/16
  clusterlab generate nftables -f manifests/ --node worker-1 --family IPv6 --service-cidr fd00:10:96::/112 > rules.nft`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stderr = cmd.ErrOrStderr()
			return runNftablesGen(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	b := &o.iptablesGenOptions
	f.StringSliceVarP(&b.manifests, "manifests", "f", nil, "manifest files or directories (YAML or JSON; repeatable)")
	f.StringVar(&b.node, "node", "", "name of the node the rules are for (endpoints with this nodeName are local)")
	f.StringSliceVar(&b.nodeIPs, "node-ip", nil, "the node's primary IP, at most one per family")
	f.StringSliceVar(&b.addresses, "node-addresses", nil, "every address on the node (default: --node-ip plus loopback)")
	f.StringVar(&b.zone, "zone", "", "the node's topology.kubernetes.io/zone")
	f.StringSliceVar(&b.clusterCIDRs, "cluster-cidr", nil, "--cluster-cidr of kube-proxy (one per family)")
	f.StringSliceVar(&b.podCIDRs, "pod-cidr", nil, "the node's pod CIDRs (for --detect-local-mode NodeCIDR)")
	f.StringVar(&b.detectLocalMode, "detect-local-mode", "", "ClusterCIDR (default), NodeCIDR, BridgeInterface, InterfaceNamePrefix or None")
	f.StringVar(&b.bridgeInterface, "pod-bridge-interface", "", "bridge for --detect-local-mode BridgeInterface")
	f.StringVar(&b.interfaceNamePrefix, "pod-interface-name-prefix", "", "prefix for --detect-local-mode InterfaceNamePrefix")
	f.StringSliceVar(&b.nodePortAddresses, "nodeport-addresses", nil, `CIDRs NodePorts answer on, or "primary" (the default in this mode)`)
	f.BoolVar(&b.masqueradeAll, "masquerade-all", false, "SNAT all cluster IP traffic")
	f.IntVar(&b.masqueradeBit, "nftables-masquerade-bit", proxy.DefaultMasqueradeBit, "bit of the packet mark that requests SNAT (kube-proxy's nftables.masqueradeBit)")
	f.StringVar(&b.family, "family", "IPv4", "IP family: IPv4 or IPv6")
	f.StringVar(&b.proxyName, "service-proxy-name", "", proxyNameUsage)
	f.StringSliceVar(&o.serviceCIDRs, "service-cidr", nil, "the cluster's ServiceCIDRs (traffic to their unallocated addresses is dropped); none: no such rule")
	f.StringVar(&o.version, "kube-proxy-version", string(nftables.DefaultVersion), fmt.Sprintf("kube-proxy release whose layout to write (%v)", nftables.Versions))
	f.BoolVar(&o.localhostNodePorts, "localhost-nodeports-gate", false, "the KubeProxyNFTablesLocalhostNodePorts feature gate (1.37 alpha): count and reject NodePort traffic to loopback")
	generateCmd.AddCommand(cmd)
}

func runNftablesGen(out io.Writer, o *nftablesGenOptions) error {
	services, slices, node, family, err := o.load()
	if err != nil {
		return err
	}
	cfg := nftables.Config{
		Family: family, Node: node, Version: nftables.Version(o.version),
		LocalhostNodePorts: o.localhostNodePorts,
	}
	for _, s := range o.serviceCIDRs {
		p, ok := proxy.ParseCIDRSloppy(s)
		if !ok {
			return badInput(fmt.Errorf("--service-cidr: invalid CIDR %q", s))
		}
		cfg.ServiceCIDRs = append(cfg.ServiceCIDRs, netip.PrefixFrom(p.Addr(), p.Bits()))
	}
	text, err := nftables.Render(services, slices, cfg)
	if err != nil {
		return badInput(err)
	}
	// Layouts before 1.37 write what those releases wrote, comments nft refuses too.
	if long := nftables.OverlongComments(text); len(long) > 0 && o.stderr != nil {
		fmt.Fprintf(o.stderr, "clusterlab: warning: the %s layout writes comments over 128 bytes, which nft refuses (the whole input does not load, as kube-proxy %s failed its syncs: kubernetes#139515; 1.37 cuts them): %q\n",
			cfg.Version, cfg.Version, long)
	}
	_, err = out.Write(text)
	return err
}
