package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"strconv"
	"strings"
)

// Tables and the chains kube-proxy's iptables mode owns.
const (
	TableFilter = "filter"
	TableNAT    = "nat"
	TableMangle = "mangle"

	ChainServices         = "KUBE-SERVICES"          // nat and filter
	ChainExternalServices = "KUBE-EXTERNAL-SERVICES" // filter
	ChainNodePorts        = "KUBE-NODEPORTS"         // nat and filter
	ChainPostrouting      = "KUBE-POSTROUTING"       // nat
	ChainMarkMasq         = "KUBE-MARK-MASQ"         // nat
	ChainForward          = "KUBE-FORWARD"           // filter
	ChainProxyFirewall    = "KUBE-PROXY-FIREWALL"    // filter
	ChainProxyCanary      = "KUBE-PROXY-CANARY"      // mangle, nat, filter (empty)
	// ChainKubeletFirewall is kube-proxy's copy of kubelet's anti-martian chain.
	ChainKubeletFirewall = "KUBE-FIREWALL" // filter
	// ChainMarkDrop is kubelet's chain marking packets for its KUBE-FIREWALL to drop;
	// kube-proxy jumped to it before 1.25 (the proxier writes it for those releases).
	ChainMarkDrop = "KUBE-MARK-DROP" // nat

	// Prefixes of the per-service-port chains.
	PrefixServiceCluster = "KUBE-SVC-"
	PrefixServiceLocal   = "KUBE-SVL-"
	PrefixExternal       = "KUBE-EXT-"
	PrefixFirewall       = "KUBE-FW-"
	PrefixEndpoint       = "KUBE-SEP-"
	// PrefixLegacyExternal is the eTP=Local chain of releases before 1.24 (KUBE-EXT
	// and KUBE-SVL since).
	PrefixLegacyExternal = "KUBE-XLB-"

	// NFAcct counters kube-proxy creates and counts with -m nfacct.
	NFAcctLocalhostNodePorts  = "localhost_nps_accepted_pkts"
	NFAcctInvalidCTDropped    = "ct_state_invalid_dropped_pkts"
	largeClusterEndpointLimit = 1000
)

// LargeClusterEndpointsThreshold is the number of endpoints (over all service ports)
// above which kube-proxy stops writing per-endpoint comments and cleans up stale chains
// at most once per sync period.
const LargeClusterEndpointsThreshold = largeClusterEndpointLimit

// PortProtoHash returns the 16-character chain-name hash of a service port: the first 16
// characters of the standard base32 encoding of SHA-256(servicePortName + protocol),
// where servicePortName is "ns/name:port" (or "ns/name") and protocol is lower case.
func PortProtoHash(servicePortName, protocol string) string {
	var buf [128]byte
	return string(hash16(buf[:0], "", servicePortName, protocol, ""))
}

// EndpointChainName returns the KUBE-SEP chain of one endpoint ("ip:port" or
// "[ip6]:port") of a service port.
func EndpointChainName(servicePortName, protocol, endpoint string) string {
	var buf [128]byte
	return string(hash16(buf[:0], PrefixEndpoint, servicePortName, protocol, endpoint))
}

// hash16 appends prefix and the first 16 base32 characters of SHA-256(a+b+c) to dst,
// using dst's spare capacity as scratch for the hash input. Sixteen base32 characters
// are exactly the encoding of the digest's first 10 bytes, so only those are encoded.
func hash16(dst []byte, prefix, a, b, c string) []byte {
	in := append(dst[len(dst):], a...)
	in = append(in, b...)
	in = append(in, c...)
	sum := sha256.Sum256(in)
	dst = append(dst, prefix...)
	var enc [16]byte
	base32.StdEncoding.Encode(enc[:], sum[:10])
	return append(dst, enc[:]...)
}

// ServiceChainNames are the four per-service-port chains; they share one hash.
type ServiceChainNames struct {
	Cluster  string // KUBE-SVC-<h>
	Local    string // KUBE-SVL-<h>
	External string // KUBE-EXT-<h>
	Firewall string // KUBE-FW-<h>
	// LegacyExternal is KUBE-XLB-<h>, the eTP=Local chain before kube-proxy 1.24.
	LegacyExternal string
}

// ServiceChains returns the chain names of a service port (the five names share one
// allocation).
func ServiceChains(servicePortName, protocol string) ServiceChainNames {
	var buf [128]byte
	h := hash16(buf[:0], "", servicePortName, protocol, "")
	var names [5*9 + 5*16]byte
	b := names[:0]
	var end [5]int
	for i, prefix := range [5]string{PrefixServiceCluster, PrefixServiceLocal, PrefixExternal, PrefixFirewall, PrefixLegacyExternal} {
		b = append(b, prefix...)
		b = append(b, h...)
		end[i] = len(b)
	}
	all := string(b)
	return ServiceChainNames{
		Cluster:  all[:end[0]],
		Local:    all[end[0]:end[1]],
		External: all[end[1]:end[2]],
		Firewall: all[end[2]:end[3]],

		LegacyExternal: all[end[3]:end[4]],
	}
}

// IsServiceChain reports whether a chain name is one of kube-proxy's per-service chains
// (the only chains it ever deletes).
func IsServiceChain(chain string) bool {
	for _, p := range []string{PrefixServiceCluster, PrefixServiceLocal, PrefixEndpoint, PrefixFirewall, PrefixExternal} {
		if strings.HasPrefix(chain, p) {
			return true
		}
	}
	return false
}

// Probability returns kube-proxy's text for 1/n: Go's "%0.10f" of 1.0/n, as
// "0.5000000000" for n=2. It is exact to that format (rounded half to even on the binary
// value, like fmt).
func Probability(n int) string {
	return strconv.FormatFloat(1.0/float64(n), 'f', 10, 64)
}

// probabilities caches Probability(n) for n < len.
type probabilities []string

func (p *probabilities) get(n int) string {
	if n >= len(*p) {
		for i := len(*p); i <= n; i++ {
			if i == 0 {
				*p = append(*p, "<bad value>")
				continue
			}
			*p = append(*p, Probability(i))
		}
	}
	return (*p)[n]
}

// chainLine returns ":CHAIN - [0:0]".
func chainLine(chain string) string { return ":" + chain + " - [0:0]" }
