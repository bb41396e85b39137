package dns

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's limits on a pod's resolver configuration (Kubernetes
// validation's MaxDNSNameservers, MaxDNSSearchPaths, MaxDNSSearchListChars
// with ExpandedDNSConfig, and the 253-character domain limit).
const (
	MaxNameservers     = 3
	MaxSearchPaths     = 32
	MaxSearchListChars = 2048
	maxSearchLen       = 253
)

// ResolvConf is a resolver configuration as in /etc/resolv.conf.
type ResolvConf struct {
	Nameservers []string // IP addresses (an ip:port is accepted by Stub)
	Searches    []string // search domains, without trailing dots
	Options     []string // "ndots:5", "edns0", ..., in order
}

// String renders the configuration as the container runtime writes a pod's
// /etc/resolv.conf: the search line, one nameserver line each, the options
// line; empty parts are left out.
func (c ResolvConf) String() string {
	var b strings.Builder
	if len(c.Searches) > 0 {
		b.WriteString("search " + strings.Join(c.Searches, " ") + "\n")
	}
	for _, ns := range c.Nameservers {
		b.WriteString("nameserver " + ns + "\n")
	}
	if len(c.Options) > 0 {
		b.WriteString("options " + strings.Join(c.Options, " ") + "\n")
	}
	return b.String()
}

// ParseResolvConf parses resolv.conf text as the kubelet and glibc read it:
// nameserver lines accumulate, the last search (or domain) line wins, the
// last options line wins; comments start with # or ;. Search domains lose a
// trailing dot (the root, ".", stays). A nameserver line without an address is an error naming its
// line.
func ParseResolvConf(text string) (ResolvConf, error) {
	var c ResolvConf
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		f := strings.Fields(line)
		switch f[0] {
		case "nameserver":
			if len(f) < 2 {
				return ResolvConf{}, fmt.Errorf("resolv.conf:%d: nameserver line without an address", i+1)
			}
			c.Nameservers = append(c.Nameservers, f[1])
		case "search", "domain":
			c.Searches = nil
			for _, s := range f[1:] {
				if t := strings.TrimRight(s, "."); t != "" {
					s = t // trailing dots go; "." alone (the root) stays
				} else {
					s = "."
				}
				c.Searches = append(c.Searches, s)
			}
		case "options":
			c.Options = append([]string(nil), f[1:]...)
		}
	}
	return c, nil
}

// Option returns the value of a resolver option ("ndots" → "5") and whether
// it is set; the last occurrence wins.
func (c ResolvConf) Option(name string) (string, bool) {
	val, found := "", false
	for _, o := range c.Options {
		n, v, _ := strings.Cut(o, ":")
		if n == name {
			val, found = v, true
		}
	}
	return val, found
}

func (c ResolvConf) intOption(name string, def, max int) int {
	v, ok := c.Option(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return def
	}
	return min(n, max)
}

// Ndots is options ndots:N (glibc: default 1, at most 15).
func (c ResolvConf) Ndots() int { return c.intOption("ndots", 1, 15) }

// Timeout is options timeout:N seconds (glibc: default 5, at most 30).
func (c ResolvConf) Timeout() time.Duration {
	return time.Duration(max(c.intOption("timeout", 5, 30), 1)) * time.Second
}

// Attempts is options attempts:N (glibc: default 2, at most 5).
func (c ResolvConf) Attempts() int { return max(c.intOption("attempts", 2, 5), 1) }

// KubeletDNS is what the kubelet knows when it writes a pod's resolv.conf.
type KubeletDNS struct {
	// ClusterDNS is --cluster-dns: the cluster DNS service IP(s), e.g. 10.96.0.10.
	ClusterDNS []string
	// ClusterDomain is --cluster-domain, e.g. cluster.local.
	ClusterDomain string
	// HostResolvConf is the node's --resolv-conf, parsed; nil when the flag is
	// empty (then Default-policy pods get 127.0.0.1 or ::1 and search ".").
	HostResolvConf *ResolvConf
	// NodeIPs decide 127.0.0.1 vs ::1 when HostResolvConf is nil.
	NodeIPs []netip.Addr
}

// PodResolvConf returns the resolver configuration the kubelet gives pod
// (pkg/kubelet/network/dns GetPodDNS) and the warning events it would emit:
//
//   - ClusterFirst (the default): nameservers = ClusterDNS only; search =
//     <ns>.svc.<domain> svc.<domain> <domain> then the node's, duplicates
//     dropped; options = ndots:5 (the node's options are replaced). A
//     hostNetwork pod falls back to Default unless its policy is
//     ClusterFirstWithHostNet; without ClusterDNS it falls back to Default
//     with a warning.
//   - Default: the node's resolv.conf. None: nothing but dnsConfig.
//   - spec.dnsConfig is then appended: nameservers and searches (duplicates
//     dropped), options merged by name with dnsConfig winning (kept in first
//     appearance order, where the kubelet's map order is unspecified).
//   - Limits: 3 nameservers, 32 search domains, 2048 characters of search
//     line, domains over 253 characters dropped; excess is cut from the end
//     with a warning.
func PodResolvConf(pod *corev1.Pod, k KubeletDNS) (ResolvConf, []string) {
	var warnings []string
	host := ResolvConf{}
	if k.HostResolvConf != nil {
		host = ResolvConf{
			Nameservers: append([]string(nil), k.HostResolvConf.Nameservers...),
			Searches:    append([]string(nil), k.HostResolvConf.Searches...),
			Options:     append([]string(nil), k.HostResolvConf.Options...),
		}
	}
	policy := pod.Spec.DNSPolicy
	switch policy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone:
	case "":
		policy = corev1.DNSClusterFirst
	default:
		warnings = append(warnings, fmt.Sprintf("invalid DNSPolicy=%v; falling back to %q", policy, corev1.DNSClusterFirst))
		policy = corev1.DNSClusterFirstWithHostNet // cluster DNS even with hostNetwork, as the kubelet does
	}
	if policy == corev1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = corev1.DNSDefault
	}
	conf := host
	switch policy {
	case corev1.DNSNone:
		conf = ResolvConf{}
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet:
		if len(k.ClusterDNS) > 0 {
			conf.Nameservers = append([]string(nil), k.ClusterDNS...)
			if k.ClusterDomain != "" {
				conf.Searches = omitDuplicates(append([]string{
					pod.Namespace + ".svc." + k.ClusterDomain,
					"svc." + k.ClusterDomain,
					k.ClusterDomain,
				}, host.Searches...))
			}
			conf.Options = []string{"ndots:5"}
			break
		}
		warnings = append(warnings, fmt.Sprintf("kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.", corev1.DNSClusterFirst, corev1.DNSDefault))
		fallthrough
	case corev1.DNSDefault:
		if k.HostResolvConf == nil {
			conf = ResolvConf{Searches: []string{"."}}
			for _, ip := range k.NodeIPs {
				if ip.Is6() && !ip.Is4In6() {
					conf.Nameservers = append(conf.Nameservers, "::1")
				} else {
					conf.Nameservers = append(conf.Nameservers, "127.0.0.1")
				}
			}
			if len(conf.Nameservers) == 0 {
				conf.Nameservers = []string{"127.0.0.1"}
			}
		}
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		conf.Nameservers = omitDuplicates(append(conf.Nameservers, dc.Nameservers...))
		conf.Searches = omitDuplicates(append(conf.Searches, dc.Searches...))
		conf.Options = mergeOptions(conf.Options, dc.Options)
	}

	if len(conf.Nameservers) > MaxNameservers {
		conf.Nameservers = conf.Nameservers[:MaxNameservers]
		warnings = append(warnings, "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: "+strings.Join(conf.Nameservers, " "))
	}
	searches, cut := fitSearches(conf.Searches)
	conf.Searches = searches
	if cut {
		warnings = append(warnings, "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: "+strings.Join(searches, " "))
	}
	return conf, warnings
}

func omitDuplicates(list []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func mergeOptions(existing []string, extra []corev1.PodDNSConfigOption) []string {
	var names []string
	vals := map[string]string{}
	set := func(n, v string) {
		if _, ok := vals[n]; !ok {
			names = append(names, n)
		}
		vals[n] = v
	}
	for _, o := range existing {
		n, v, _ := strings.Cut(o, ":")
		set(n, v)
	}
	for _, o := range extra {
		v := ""
		if o.Value != nil {
			v = *o.Value
		}
		set(o.Name, v)
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if v := vals[n]; v != "" {
			out = append(out, n+":"+v)
		} else {
			out = append(out, n)
		}
	}
	return out
}

// fitSearches applies the kubelet's search-line limits.
func fitSearches(s []string) ([]string, bool) {
	cut := false
	if len(s) > MaxSearchPaths {
		s, cut = s[:MaxSearchPaths], true
	}
	var kept []string
	for _, d := range s {
		if len(d) > maxSearchLen {
			cut = true
			continue
		}
		kept = append(kept, d)
	}
	if l := len(strings.Join(kept, " ")); l > MaxSearchListChars {
		cut = true
		for len(kept) > 0 && len(strings.Join(kept, " ")) > MaxSearchListChars {
			kept = kept[:len(kept)-1]
		}
	}
	return kept, cut
}
