package scenario

import (
	"fmt"
	"strings"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// Versions of kube-proxy a scenario can name come from each mode's descriptor
// (kubeproxy.ModeInfo.Versions): the releases modelled, the default, a removal (an
// error from that release on) and a deprecation (a note). Across modes:
//
//   - before 1.34 a mode that reads EndpointSlice hints ignores the node hints
//     (trafficDistribution PreferSameNode): the PreferSameTrafficDistribution gate is off;
//   - every version clears stale UDP conntrack entries in the (IP, port) form of
//     1.29-1.30 (package proxy's StaleConntrackFilters); later versions' whole-table
//     reconciliation is not modelled.

// VersionNotes says, for help texts, which kube-proxy versions each mode of the build
// is modelled in and what a version changes.
func VersionNotes() string {
	var b strings.Builder
	b.WriteString("kube-proxy versions (cluster.proxy.version):\n")
	for _, m := range kubeproxy.Registered() {
		v := m.Versions
		fmt.Fprintf(&b, "  %-10s %s-%s (default %s)", m.Mode, v.First, v.Last, v.Default)
		if v.Removed != "" {
			fmt.Fprintf(&b, "; removed in %s", v.Removed)
		}
		if v.Deprecated != "" {
			fmt.Fprintf(&b, "; from %s: %s", v.Deprecated, v.DeprecationNote)
		}
		b.WriteString("\n")
	}
	b.WriteString("  before 1.34: EndpointSlice node hints (trafficDistribution: PreferSameNode) are ignored\n")
	b.WriteString("             (the PreferSameTrafficDistribution gate is off)\n")
	b.WriteString("  every version clears stale UDP conntrack entries in the (IP, port) form of 1.29-1.30")
	return b.String()
}

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
