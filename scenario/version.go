package scenario

import (
	"fmt"

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

// versionBehaviour maps a kube-proxy version onto the knobs of the proxy packages,
// within the releases the mode's descriptor says it is modelled in.
func versionBehaviour(v string, info kubeproxy.ModeInfo) (string, []string, []func(*proxy.NodeConfig), error) {
	vs := info.Versions
	explicit := v != ""
	if !explicit {
		v = vs.Default
	}
	minor, err := kubeproxy.Minor(v)
	if err != nil {
		return "", nil, nil, err
	}
	ver := fmt.Sprintf("1.%d", minor)
	first, last := mustMinor(vs.First), mustMinor(vs.Last)
	switch {
	case vs.Removed != "" && minor >= mustMinor(vs.Removed):
		return "", nil, nil, fmt.Errorf("%s: the %s proxy mode was removed in kube-proxy %s; use version %s or earlier, or another mode", v, info.Mode, vs.Removed, vs.Last)
	case minor < first:
		return "", nil, nil, fmt.Errorf("%s: kube-proxy before %s is not modelled for the %s mode (its rules follow %s-%s)", v, vs.First, info.Mode, vs.First, vs.Last)
	case minor > last:
		return "", nil, nil, fmt.Errorf("%s: newer than the model (%s-%s)", v, vs.First, vs.Last)
	}
	var notes []string
	var mods []func(*proxy.NodeConfig)
	if info.NodeHints && minor < 34 {
		mods = append(mods, func(nc *proxy.NodeConfig) { nc.IgnoreNodeHints = true })
		if explicit {
			notes = append(notes, fmt.Sprintf("kube-proxy %s: EndpointSlice node hints are ignored (PreferSameTrafficDistribution is off before 1.34)", ver))
		}
	}
	if vs.Deprecated != "" && minor >= mustMinor(vs.Deprecated) {
		notes = append(notes, fmt.Sprintf("kube-proxy %s: %s", ver, vs.DeprecationNote))
	}
	return ver, notes, mods, nil
}

// mustMinor is kubeproxy.Minor of a version a mode's descriptor gives (kubeproxy's
// TestModeTable checks they parse).
func mustMinor(v string) int {
	m, err := kubeproxy.Minor(v)
	if err != nil {
		panic(err)
	}
	return m
}
