package scenario

import (
	"fmt"
	"slices"
	"strings"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// Versions of kube-proxy a scenario can name come from each mode's descriptor
// (kubeproxy.ModeInfo.Versions): the releases modelled, the default, a removal (an
// error from that release on) and a deprecation (a note). The version becomes each
// node's proxy.NodeConfig.Version: every behaviour change between releases is a
// proxy.Change the proxies ask about (docs/VERSIONS.md lists them), and feature gates
// take the release's defaults, which cluster.proxy.feature_gates overrides.

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
	b.WriteString("  a version selects that release's behaviour changes and feature-gate defaults\n")
	b.WriteString("  (docs/VERSIONS.md); feature_gates: overrides gates as --feature-gates does")
	return b.String()
}

// versionBehaviour maps a kube-proxy version onto the knobs of the proxy packages,
// within the releases the mode's descriptor says it is modelled in; a mode behind a
// feature gate at that release (a proxy.Change of area "mode availability" with a
// Gate) needs the gate on, by default or in gates (cluster.proxy.feature_gates).
func versionBehaviour(v string, info kubeproxy.ModeInfo, gates map[string]bool) (string, []string, []func(*proxy.NodeConfig), error) {
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
	pv := proxy.Version(minor)
	nc := proxy.NodeConfig{Version: pv, FeatureGates: gates}
	for _, ch := range proxy.Changes() {
		if ch.Area == "mode availability" && ch.Gate != "" && slices.Contains(ch.Modes, string(info.Mode)) && pv.AtLeast(int(ch.Version)) && !nc.GateEnabled(ch.Gate) {
			return "", nil, nil, fmt.Errorf("%s: the %s proxy mode needs the %s feature gate in kube-proxy %s (off by default); set cluster.proxy.feature_gates.%s: true", v, info.Mode, ch.Gate, ver, ch.Gate)
		}
	}
	mods := []func(*proxy.NodeConfig){func(nc *proxy.NodeConfig) { nc.Version = pv }}
	if explicit {
		for _, ch := range proxy.PartlyModelled(pv, string(info.Mode)) {
			what := "not modelled"
			if ch.Modelled == proxy.ModelledPartly {
				what = "partly modelled"
				if ch.Note != "" {
					what += ": " + ch.Note
				}
			}
			notes = append(notes, fmt.Sprintf("warning: kube-proxy %s predates %s (%s, %s), which is %s; the replay may show the later behaviour", ver, ch.Name, ch.Version, ch.Ref, what))
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
