package nftables

import (
	"crypto/sha256"
	"encoding/base32"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/proxy"
)

// Fixed object names of kube-proxy's table (1.34+ base chains).
const (
	ChainFilterPreroutingPreDNAT = "filter-prerouting-pre-dnat"
	ChainFilterOutputPreDNAT     = "filter-output-pre-dnat"
	ChainFilterInput             = "filter-input"
	ChainFilterForward           = "filter-forward"
	ChainFilterOutput            = "filter-output"
	ChainNATPrerouting           = "nat-prerouting"
	ChainNATOutput               = "nat-output"
	ChainNATPostrouting          = "nat-postrouting"

	ChainServices               = "services"
	ChainMasquerading           = "masquerading"
	ChainServiceEndpointsCheck  = "service-endpoints-check"
	ChainNodePortEndpointsCheck = "nodeport-endpoints-check"
	ChainClusterIPsCheck        = "cluster-ips-check"
	ChainFirewallCheck          = "firewall-check"
	ChainReject                 = "reject-chain"

	// Chains of the older layouts: filter-prerouting and filter-output-post-dnat
	// (1.30-1.33), mark-for-masquerade (up to 1.35), endpoints-check and forward
	// (1.29).
	ChainFilterPrerouting     = "filter-prerouting"
	ChainFilterOutputPostDNAT = "filter-output-post-dnat"
	ChainMarkForMasquerade    = "mark-for-masquerade"
	ChainEndpointsCheck       = "endpoints-check"
	ChainForward              = "forward"

	SetClusterIPs          = "cluster-ips"
	SetNodePortIPs         = "nodeport-ips"
	SetHairpinConnections  = "hairpin-connections"
	MapServiceIPs          = "service-ips"
	MapServiceNodePorts    = "service-nodeports"
	MapNoEndpointServices  = "no-endpoint-services"
	MapNoEndpointNodePorts = "no-endpoint-nodeports"
	MapFirewallIPs         = "firewall-ips"

	// MapLocalhostNodePortReject and the chains and counters named by
	// LocalhostNodePortRejectChain / LocalhostNodePortRejectCounter exist with the
	// 1.37 KubeProxyNFTablesLocalhostNodePorts gate.
	MapLocalhostNodePortReject = "localhost-nodeport-reject-ports"
)

// Prefixes of the per-service and per-endpoint object names.
const (
	PrefixService  = "service-"
	PrefixLocal    = "local-"
	PrefixExternal = "external-"
	PrefixFirewall = "firewall-"
	PrefixEndpoint = "endpoint-"
	PrefixAffinity = "affinity-"
)

// chainNameBaseMax is the longest name base: knftables' NameLengthMax less room for the
// longest prefix (16 bytes).
const chainNameBaseMax = knftables.NameLengthMax - 16

// LocalhostNodePortRejectChain returns "localhost-nodeport-reject-tcp" and so on.
func LocalhostNodePortRejectChain(p string) string { return "localhost-nodeport-reject-" + p }

// LocalhostNodePortRejectCounter returns "localhost-nodeport-rejected-tcp" and so on.
func LocalhostNodePortRejectCounter(p string) string { return "localhost-nodeport-rejected-" + p }

// HashAndTruncate returns kube-proxy's name base for a readable name: the first 8
// characters of the base32 (RFC 4648, upper case) SHA-256 of name, "-", name, cut to
// 237 bytes plus "..." if longer than 240 bytes.
func HashAndTruncate(name string) string {
	sum := sha256.Sum256([]byte(name))
	enc := base32.StdEncoding.EncodeToString(sum[:])
	name = enc[:8] + "-" + name
	if len(name) > chainNameBaseMax {
		name = name[:chainNameBaseMax-3] + "..."
	}
	return name
}

// ServiceNameBase returns the name base of a service port's chains,
// "HASH-ns/svc/tcp/port", proto being the lower-case protocol.
func ServiceNameBase(n proxy.ServicePortName, proto string) string {
	return HashAndTruncate(n.Namespace + "/" + n.Name + "/" + proto + "/" + n.Port)
}

// EndpointNameBase returns the name base of an endpoint's chain and affinity set,
// "HASH-ns/svc/tcp/port__IP/PORT", with the colons of an IPv6 address made dots.
func EndpointNameBase(n proxy.ServicePortName, proto string, ep *proxy.Endpoint) string {
	return endpointNameBase(n, proto, ep.IPString(), strconv.Itoa(ep.Port))
}

// endpointNameBase is EndpointNameBase for an address and port as text. kube-proxy
// hashes the address as Go prints it (never "::" for a single zero group), which is
// what proxy.Endpoint.IPString gives.
func endpointNameBase(n proxy.ServicePortName, proto, ip, port string) string {
	ip = strings.ReplaceAll(ip, ":", ".")
	return HashAndTruncate(n.Namespace + "/" + n.Name + "/" + proto + "/" + n.Port + "__" + ip + "/" + port)
}

// IsServiceChainName reports whether a chain is a per-service or per-endpoint chain
// (those, and only those, have a "/" in their names).
func IsServiceChainName(name string) bool { return strings.Contains(name, "/") }

// IsAffinitySetName reports whether a set is a per-endpoint affinity set.
func IsAffinitySetName(name string) bool { return strings.HasPrefix(name, PrefixAffinity) }

// ServiceChainNames are the chain names of one service port.
type ServiceChainNames struct {
	Cluster, Local, External, Firewall string
}

// ServiceChains returns the chain names of a service port.
func ServiceChains(n proxy.ServicePortName, proto string) ServiceChainNames {
	base := ServiceNameBase(n, proto)
	return ServiceChainNames{
		Cluster:  PrefixService + base,
		Local:    PrefixLocal + base,
		External: PrefixExternal + base,
		Firewall: PrefixFirewall + base,
	}
}

// commentRE finds the comments of an nft script.
var commentRE = regexp.MustCompile(`comment "([^"]*)"`)

// OverlongComments returns, once each in order, the comments of an nft script (such as
// Render's) longer than nft takes (knftables.CommentLengthMax, 128 bytes: "comment too
// long"). The layouts before 1.37 write element comments ("ns/name:port") whole, as
// those releases did, and nft refuses the whole script then: kube-proxy 1.29-1.36
// failed every sync of a cluster with such a Service (kubernetes#139515; 1.37 cuts
// them, kubernetes#139516).
func OverlongComments(script []byte) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range commentRE.FindAllSubmatch(script, -1) {
		if c := string(m[1]); len(c) > knftables.CommentLengthMax && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// truncateComment cuts a comment to nftables' 128-byte limit (kube-proxy 1.37+).
func truncateComment(s string) string {
	if len(s) > knftables.CommentLengthMax {
		return s[:knftables.CommentLengthMax]
	}
	return s
}
