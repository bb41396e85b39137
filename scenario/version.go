package scenario

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// CurrentVersion is the kube-proxy version a scenario models when it names none.
const CurrentVersion = "1.35"

// Versions of kube-proxy a scenario can name, and what each changes. The iptables rule
// layout and the IPVS mode are modelled as kube-proxy 1.28 to 1.35 write them; the
// userspace mode as it was until its removal.
//
//	version      iptables / ipvs                           userspace
//	1.0 - 1.25   not modelled (an error)                   the mode as its last release had it
//	1.26 - 1.27  not modelled (an error)                   removed in 1.26 (an error)
//	1.28 - 1.33  PreferSameTrafficDistribution off:        removed (an error)
//	             EndpointSlice node hints (trafficDistribution
//	             PreferSameNode) are ignored
//	1.34 - 1.35  node hints honoured (beta in 1.34, GA 1.35); removed (an error)
//	             1.35 notes the IPVS mode's deprecation
//
// Every version clears stale UDP conntrack entries in the (IP, port) form of 1.29-1.30
// (package proxy's StaleConntrackFilters); later versions' whole-table reconciliation is
// not modelled.
const VersionNotes = `kube-proxy versions (cluster.proxy.version):
  1.28-1.33  iptables, ipvs: EndpointSlice node hints (trafficDistribution: PreferSameNode) ignored
             (the PreferSameTrafficDistribution gate is off before 1.34)
  1.34-1.35  iptables, ipvs: node hints honoured; 1.35 notes that the IPVS mode is deprecated
  <=1.25     userspace only (the mode was removed in 1.26); iptables and ipvs before 1.28 are not modelled
  every version clears stale UDP conntrack entries in the (IP, port) form of 1.29-1.30`

// versionBehaviour maps a kube-proxy version onto the knobs of the proxy packages.
func versionBehaviour(v string, mode kubeproxy.Mode) (string, []string, []func(*proxy.NodeConfig), error) {
	explicit := v != ""
	if !explicit {
		v = CurrentVersion
		if mode == kubeproxy.Userspace {
			v = "1.25"
		}
	}
	minor, err := parseMinor(v)
	if err != nil {
		return "", nil, nil, err
	}
	ver := fmt.Sprintf("1.%d", minor)
	var notes []string
	var mods []func(*proxy.NodeConfig)
	switch mode {
	case kubeproxy.Userspace:
		if minor >= 26 {
			return "", nil, nil, fmt.Errorf("%s: the userspace proxy mode was removed in kube-proxy 1.26; use version 1.25 or earlier, or another mode", v)
		}
		return ver, nil, nil, nil
	default:
		if minor < 28 {
			return "", nil, nil, fmt.Errorf("%s: kube-proxy before 1.28 is not modelled for the %s mode (its rules follow 1.28-1.35)", v, mode)
		}
	}
	if minor > 35 {
		return "", nil, nil, fmt.Errorf("%s: newer than the model (1.28-1.35)", v)
	}
	if minor < 34 {
		mods = append(mods, func(nc *proxy.NodeConfig) { nc.IgnoreNodeHints = true })
		if explicit {
			notes = append(notes, fmt.Sprintf("kube-proxy %s: EndpointSlice node hints are ignored (PreferSameTrafficDistribution is off before 1.34)", ver))
		}
	}
	if minor >= 35 && mode == kubeproxy.IPVS {
		notes = append(notes, fmt.Sprintf("kube-proxy %s: the IPVS mode is deprecated (KEP-5495); nftables is the suggested replacement", ver))
	}
	return ver, notes, mods, nil
}

func parseMinor(v string) (int, error) {
	s := strings.TrimPrefix(strings.TrimSpace(v), "v")
	major, rest, ok := strings.Cut(s, ".")
	if !ok || major != "1" {
		return 0, fmt.Errorf("want a version such as 1.31, got %q", v)
	}
	minorStr, _, _ := strings.Cut(rest, ".")
	minor, err := strconv.Atoi(minorStr)
	if err != nil || minor < 0 {
		return 0, fmt.Errorf("want a version such as 1.31, got %q", v)
	}
	return minor, nil
}
