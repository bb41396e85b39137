package main

import (
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/service"
)

// generateCmd groups the commands that print what a proxy mode would program.
var generateCmd = &cobra.Command{
	Use:   "generate",
	Short: "Print the ruleset a kube-proxy mode writes for a set of manifests",
}

type iptablesGenOptions struct {
	// stderr receives what load derives (nil: dropped).
	stderr              io.Writer
	manifests           []string
	node                string
	nodeIPs             []string
	addresses           []string
	zone                string
	clusterCIDRs        []string
	podCIDRs            []string
	detectLocalMode     string
	bridgeInterface     string
	interfaceNamePrefix string
	nodePortAddresses   []string
	masqueradeAll       bool
	masqueradeBit       int
	localhostNodePorts  bool
	family              string
	jumps               bool
	noRandomFully       bool
	noNFAcct            bool
	tcpBeLiberal        bool
	proxyName           string
}

const proxyNameUsage = "write the rules of the proxy of this name: only the Services labelled service.kubernetes.io/service-proxy-name=NAME (default: kube-proxy's, which skips them)"

const iptablesGenLong = `Print the iptables-restore input kube-proxy's iptables mode writes on a full sync
for the Services and EndpointSlices in the manifests, as seen from one node: *filter and
*nat sections with KUBE-SERVICES, KUBE-NODEPORTS, KUBE-SVC/SVL/EXT/FW/SEP chains and the
rest, byte for byte as kube-proxy writes them (services in namespace/name/port order).

The node is described by flags, or by a Node object of that name in the manifests (its
zone label, InternalIP addresses and podCIDRs, unless flags say otherwise). The output
applies with iptables-restore --noflush; with --jumps it also carries the hook jump rules
kube-proxy inserts with iptables -I, for loading a node that has none.

Services labelled service.kubernetes.io/service-proxy-name are left out, as kube-proxy
leaves them out (and EndpointSlices labelled service.kubernetes.io/headless; before
1.35 both kinds with either label); --service-proxy-name NAME writes the rules of the
proxy of that name instead: only the Services labelled
service.kubernetes.io/service-proxy-name=NAME.

The manifests are taken as dns serve and run take them: a Service without a clusterIP
gets the address derived from its name, and a selector Service without EndpointSlices
(or Endpoints) in the files gets the slices the EndpointSlice controller would write for
the files' Pods; a dump's own slices are kept as they are. Each is said on stderr.`

func init() {
	o := &iptablesGenOptions{}
	cmd := &cobra.Command{
		Use:   "iptables -f MANIFESTS --node NAME [flags]",
		Short: "Print kube-proxy's iptables-mode ruleset for Services and EndpointSlices",
		Long:  iptablesGenLong,
		Example: `  clusterlab generate iptables -f cluster.yaml --node worker-1 --node-ip 192.168.0.2 --cluster-cidr 10.244.0.0/16
  clusterlab generate iptables -f manifests/ --node worker-1 --family IPv6 --jumps > rules.txt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stderr = cmd.ErrOrStderr()
			return runIptablesGen(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringSliceVarP(&o.manifests, "manifests", "f", nil, "manifest files or directories (YAML or JSON; repeatable)")
	f.StringVar(&o.node, "node", "", "name of the node the rules are for (required; endpoints with this nodeName are local)")
	f.StringSliceVar(&o.nodeIPs, "node-ip", nil, "the node's primary IP, at most one per family")
	f.StringSliceVar(&o.addresses, "node-addresses", nil, "every address on the node (default: --node-ip plus loopback)")
	f.StringVar(&o.zone, "zone", "", "the node's topology.kubernetes.io/zone")
	f.StringSliceVar(&o.clusterCIDRs, "cluster-cidr", nil, "--cluster-cidr of kube-proxy (one per family)")
	f.StringSliceVar(&o.podCIDRs, "pod-cidr", nil, "the node's pod CIDRs (for --detect-local-mode NodeCIDR)")
	f.StringVar(&o.detectLocalMode, "detect-local-mode", "", "ClusterCIDR (default), NodeCIDR, BridgeInterface, InterfaceNamePrefix or None")
	f.StringVar(&o.bridgeInterface, "pod-bridge-interface", "", "bridge for --detect-local-mode BridgeInterface")
	f.StringVar(&o.interfaceNamePrefix, "pod-interface-name-prefix", "", "prefix for --detect-local-mode InterfaceNamePrefix")
	f.StringSliceVar(&o.nodePortAddresses, "nodeport-addresses", nil, `CIDRs NodePorts answer on, or "primary"`)
	f.BoolVar(&o.masqueradeAll, "masquerade-all", false, "SNAT all cluster IP traffic")
	f.IntVar(&o.masqueradeBit, "iptables-masquerade-bit", proxy.DefaultMasqueradeBit, "bit of the packet mark that requests SNAT")
	f.BoolVar(&o.localhostNodePorts, "iptables-localhost-nodeports", true, "accept NodePort traffic to 127.0.0.1 (IPv4)")
	f.StringVar(&o.family, "family", "IPv4", "IP family: IPv4 or IPv6")
	f.BoolVar(&o.jumps, "jumps", false, "include the hook jump rules (PREROUTING → KUBE-SERVICES, ...)")
	f.BoolVar(&o.noRandomFully, "no-random-fully", false, "MASQUERADE without --random-fully (iptables < 1.6.2)")
	f.BoolVar(&o.noNFAcct, "no-nfacct", false, "no nfacct counters (no -m nfacct rules)")
	f.BoolVar(&o.tcpBeLiberal, "conntrack-tcp-be-liberal", false, "nf_conntrack_tcp_be_liberal is set (no INVALID drop)")
	f.StringVar(&o.proxyName, "service-proxy-name", "", proxyNameUsage)
	generateCmd.AddCommand(cmd)
	rootCmd.AddCommand(generateCmd)
}

func runIptablesGen(out io.Writer, o *iptablesGenOptions) error {
	services, slices, node, family, err := o.load()
	if err != nil {
		return err
	}
	cfg := iptables.Config{
		Family: family, Node: node, NoRandomFully: o.noRandomFully, NoNFAcct: o.noNFAcct,
		ConntrackTCPBeLiberal: o.tcpBeLiberal,
	}
	text, err := iptables.Render(services, slices, cfg, iptables.RenderOptions{IncludeJumps: o.jumps})
	if err != nil {
		return badInput(err)
	}
	_, err = out.Write(text)
	return err
}

// load reads the manifests (Services, EndpointSlices and the node's Node object) and
// resolves the node and family flags, for the generate commands. Errors are usage
// errors.
func (o *iptablesGenOptions) load() ([]*corev1.Service, []*discoveryv1.EndpointSlice, proxy.NodeConfig, corev1.IPFamily, error) {
	var node proxy.NodeConfig
	if len(o.manifests) == 0 {
		return nil, nil, node, "", badInput(fmt.Errorf("--manifests: at least one file or directory is required"))
	}
	if o.node == "" {
		return nil, nil, node, "", badInput(fmt.Errorf("--node is required: the rules are a node's (its endpoints are local, its Node object gives its addresses)"))
	}
	ms, err := service.LoadPaths(o.manifests...)
	if err != nil {
		return nil, nil, node, "", badInput(err)
	}
	// What the API server would reject is an error naming file, line and field, as in
	// dns serve and run, not rules iptables-restore would refuse.
	if err := service.ValidateManifests(ms); err != nil {
		return nil, nil, node, "", badInput(err)
	}
	var services []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	var nodeObj *corev1.Node
	// A Service without a clusterIP gets the address every clusterlab command gives it,
	// and a selector Service without EndpointSlices in the files gets those the
	// controller would write for the files' Pods (a dump's own slices are kept), as in
	// dns serve and run.
	objs, notes := service.CompleteObjects(service.Objects(ms), []netip.Prefix{service.DefaultServiceCIDR, dns.ServeServiceCIDRv6})
	for _, n := range notes {
		if o.stderr != nil {
			fmt.Fprintln(o.stderr, "clusterlab: "+n)
		}
	}
	for _, obj := range objs {
		switch obj := obj.(type) {
		case *corev1.Service:
			s := obj.DeepCopy()
			s.Namespace = service.NamespaceOrDefault(s.Namespace) // as the API server stores it
			service.Default(s)
			services = append(services, s)
		case *discoveryv1.EndpointSlice:
			if obj.Namespace == "" {
				obj = obj.DeepCopy()
				obj.Namespace = service.NamespaceOrDefault("")
			}
			slices = append(slices, obj)
		case *corev1.Node:
			if o.node != "" && obj.Name == o.node {
				nodeObj = obj
			}
		}
	}
	if node, err = o.nodeConfig(nodeObj); err != nil {
		return nil, nil, node, "", badInput(err)
	}
	var family corev1.IPFamily
	switch strings.ToLower(o.family) {
	case "ipv4", "4":
		family = corev1.IPv4Protocol
	case "ipv6", "6":
		family = corev1.IPv6Protocol
	default:
		return nil, nil, node, "", badInput(fmt.Errorf("--family: %q is neither IPv4 nor IPv6", o.family))
	}
	if d := node.NewLocalTrafficDetector(family); d.Mode == proxy.LocalModeNone && o.stderr != nil {
		// kube-proxy starts with a no-op detector and a warning here ("no PodCIDR
		// defined at node"); so does the generated ruleset, and the warning is said.
		switch node.DetectLocalMode {
		case proxy.LocalModeNodeCIDR:
			fmt.Fprintf(o.stderr, "clusterlab: warning: --detect-local-mode NodeCIDR without an %s pod CIDR (--pod-cidr, or spec.podCIDRs of --node's Node in the files): local traffic is not detected, as kube-proxy does then\n", family)
		case "", proxy.LocalModeClusterCIDR:
			if node.DetectLocalMode != "" || len(node.ClusterCIDRs) > 0 {
				fmt.Fprintf(o.stderr, "clusterlab: warning: --detect-local-mode ClusterCIDR without an %s --cluster-cidr: local traffic is not detected, as kube-proxy does then\n", family)
			}
		}
	}
	return services, slices, node, family, nil
}

func (o *iptablesGenOptions) nodeConfig(n *corev1.Node) (proxy.NodeConfig, error) {
	c := proxy.NodeConfig{
		Name:                o.node,
		DetectLocalMode:     proxy.LocalMode(o.detectLocalMode),
		BridgeInterface:     o.bridgeInterface,
		InterfaceNamePrefix: o.interfaceNamePrefix,
		NodePortAddresses:   o.nodePortAddresses,
		MasqueradeAll:       o.masqueradeAll,
		MasqueradeBit:       &o.masqueradeBit,
		LocalhostNodePorts:  &o.localhostNodePorts,
		ProxyName:           o.proxyName,
	}
	addrs := func(flag string, list []string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, s := range list {
			a, ok := proxy.ParseIPSloppy(s)
			if !ok {
				return nil, fmt.Errorf("--%s: invalid IP address %q", flag, s)
			}
			out = append(out, a)
		}
		return out, nil
	}
	prefixes := func(flag string, list []string) ([]netip.Prefix, error) {
		var out []netip.Prefix
		for _, s := range list {
			p, ok := proxy.ParseCIDRSloppy(s)
			if !ok {
				return nil, fmt.Errorf("--%s: invalid CIDR %q", flag, s)
			}
			out = append(out, p)
		}
		return out, nil
	}
	var err error
	if c.IPs, err = addrs("node-ip", o.nodeIPs); err != nil {
		return c, err
	}
	if c.Addresses, err = addrs("node-addresses", o.addresses); err != nil {
		return c, err
	}
	if c.ClusterCIDRs, err = prefixes("cluster-cidr", o.clusterCIDRs); err != nil {
		return c, err
	}
	if c.PodCIDRs, err = prefixes("pod-cidr", o.podCIDRs); err != nil {
		return c, err
	}
	if o.zone != "" {
		c.Labels = map[string]string{corev1.LabelTopologyZone: o.zone}
	}
	if n != nil {
		if c.Labels == nil {
			c.Labels = n.Labels
		}
		if len(c.IPs) == 0 {
			seen := map[bool]bool{}
			for _, a := range n.Status.Addresses {
				if a.Type != corev1.NodeInternalIP {
					continue
				}
				if ip, ok := proxy.ParseIPSloppy(a.Address); ok && !seen[ip.Is4()] {
					seen[ip.Is4()] = true
					c.IPs = append(c.IPs, ip)
				}
			}
		}
		if len(c.PodCIDRs) == 0 {
			for _, s := range n.Spec.PodCIDRs {
				if p, ok := proxy.ParseCIDRSloppy(s); ok {
					c.PodCIDRs = append(c.PodCIDRs, p)
				}
			}
		}
	}
	return c, c.Validate()
}
