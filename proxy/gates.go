package proxy

import (
	"fmt"
	"slices"
	"strings"
)

// Gate is a kube-proxy feature gate's life: the releases it reached alpha (off by
// default), beta and GA in, and whether its beta was on by default. From GA on the gate
// is locked on: kube-proxy refuses --feature-gates=NAME=false.
type Gate struct {
	Name string
	// Alpha, Beta and GA are the releases of each stage (0: the stage was skipped or
	// has not come).
	Alpha, Beta, GA Version
	// BetaOff: the gate's beta was off by default (TopologyAwareHints in 1.23), until
	// BetaOn (0: until GA).
	BetaOff bool
	BetaOn  Version
	// Ref names the KEP.
	Ref string
}

// gates are the feature gates that change what kube-proxy programs (the reference
// table's gate column; KEP kep.yaml milestones).
// (A variable's initialiser runs before every init function, so the changes that
// init functions register can name gates.)
var gates = gateTable()

func gateTable() map[string]Gate {
	m := map[string]Gate{}
	for _, g := range []Gate{
		{Name: "ServiceInternalTrafficPolicy", Alpha: 21, Beta: 22, GA: 26, Ref: "KEP-2086"},
		{Name: "ProxyTerminatingEndpoints", Alpha: 22, Beta: 26, GA: 28, Ref: "KEP-1669"},
		{Name: "TopologyAwareHints", Alpha: 21, Beta: 23, GA: 33, BetaOff: true, BetaOn: 24, Ref: "KEP-2433"},
		{Name: "ServiceTrafficDistribution", Alpha: 30, Beta: 31, GA: 33, Ref: "KEP-4444"},
		{Name: "PreferSameTrafficDistribution", Alpha: 33, Beta: 34, GA: 35, Ref: "KEP-3015"},
		{Name: "LoadBalancerIPMode", Alpha: 29, Beta: 30, GA: 32, Ref: "KEP-1860"},
		{Name: "KubeProxyDrainingTerminatingNodes", Alpha: 28, Beta: 30, GA: 31, Ref: "KEP-3836"},
		{Name: "MinimizeIPTablesRestore", Alpha: 26, Beta: 27, GA: 28, Ref: "KEP-3453"},
		{Name: "NFTablesProxyMode", Alpha: 29, Beta: 31, GA: 33, Ref: "KEP-3866"},
		{Name: "KubeProxyNFTablesLocalhostNodePorts", Alpha: 37, Ref: "KEP-6032"},
	} {
		m[g.Name] = g
	}
	return m
}

// Gates lists the feature gates the model knows, by name.
func Gates() []Gate {
	out := make([]Gate, 0, len(gates))
	for _, g := range gates {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b Gate) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// LookupGate returns the gate of that name.
func LookupGate(name string) (Gate, bool) {
	g, ok := gates[name]
	return g, ok
}

// Exists reports whether release v has the gate (from its alpha on).
func (g Gate) Exists(v Version) bool {
	first := g.Alpha
	if first == 0 {
		first = g.Beta
	}
	return first != 0 && v.AtLeast(int(first))
}

// Locked reports whether the gate is GA (locked on) in release v.
func (g Gate) Locked(v Version) bool { return g.GA != 0 && v.AtLeast(int(g.GA)) }

// Default is the gate's default in release v: off before it exists and in alpha, on in
// beta (unless its beta was off) and GA.
func (g Gate) Default(v Version) bool {
	switch {
	case g.Locked(v):
		return true
	case g.Beta != 0 && v.AtLeast(int(g.Beta)):
		if g.BetaOff {
			return g.BetaOn != 0 && v.AtLeast(int(g.BetaOn))
		}
		return true
	}
	return false
}

// GateEnabled reports whether the node's kube-proxy runs with the named gate on: the
// --feature-gates override, else the gate's default for its release. A gate the
// release does not have is off. It panics on a gate the model does not know (a
// programming error; NodeConfig.Validate refuses unknown names in FeatureGates).
func (c *NodeConfig) GateEnabled(name string) bool {
	g, ok := gates[name]
	if !ok {
		panic(fmt.Sprintf("proxy: no feature gate named %q", name))
	}
	if !g.Exists(c.Version) || (name == "PreferSameTrafficDistribution" && c.IgnoreNodeHints) {
		return false
	}
	if on, ok := c.FeatureGates[name]; ok {
		return on
	}
	return g.Default(c.Version)
}

// validateGates checks --feature-gates as kube-proxy does: known names, present in the
// release, not turned off once locked on.
func (c *NodeConfig) validateGates() []error {
	var errs []error
	names := make([]string, 0, len(c.FeatureGates))
	for n := range c.FeatureGates {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		g, ok := gates[n]
		switch {
		case !ok:
			var known []string
			for _, k := range Gates() {
				known = append(known, k.Name)
			}
			errs = append(errs, fmt.Errorf("node config: featureGates: unknown feature gate %q (the model knows %s)", n, strings.Join(known, ", ")))
		case !g.Exists(c.Version):
			errs = append(errs, fmt.Errorf("node config: featureGates: %s does not exist in kube-proxy %s (alpha in %s)", n, c.Version.Resolved(), g.Alpha))
		case g.Locked(c.Version) && !c.FeatureGates[n]:
			errs = append(errs, fmt.Errorf("node config: featureGates: cannot set feature gate %s to false, feature is locked to true (GA in %s)", n, g.GA))
		}
	}
	return errs
}
