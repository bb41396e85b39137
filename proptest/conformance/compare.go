package conformance

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/clusterlab/clusterlab/proptest"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// Mode is a proxy the suite runs cases under.
type Mode struct {
	Name      string
	Proxy     proptest.ProxyFor
	Semantics proptest.Semantics
}

// KubeProxyMode is one of kube-proxy's modes with its semantics.
func KubeProxyMode(m kubeproxy.Mode) Mode {
	return Mode{Name: string(m), Proxy: proptest.KubeProxy(m), Semantics: proptest.SemanticsFor(string(m))}
}

// Reference is the mode the others are held to: kube-proxy's iptables mode, the
// default and the one the invariants describe.
var Reference = KubeProxyMode(kubeproxy.Reference().Mode)

// Modes are kube-proxy's other modes, compared with the reference.
func Modes() []Mode {
	var out []Mode
	for _, m := range kubeproxy.Modes() {
		if string(m) != Reference.Name {
			out = append(out, KubeProxyMode(m))
		}
	}
	return out
}

// Mismatch is an outcome of a flow under a mode that the reference mode cannot give.
type Mismatch struct {
	Flow Flow
	Mode string
	// Ref is the reference mode's observation, Got the outcome under Mode.
	Ref Observation
	Got Outcome
	// Differences name the by-design differences that explain it (none: unexplained).
	Differences []string
	// Scope, when set, says the mismatch is in the scope of ClientIP affinity: the
	// reference pinned the client to one backend across several flows, and the mode
	// answered this flow from another backend than it answered Scope.Other from.
	Scope *AffinityScope
}

// AffinityScope is where ClientIP affinity held in the reference but not in a mode.
type AffinityScope struct {
	// Pinned is the backend the reference kept the client on, for every flow of the
	// scope (AffinityScopes).
	Pinned string
	// Other is an earlier flow of the scope, which the mode answered from OtherBackend.
	Other        Flow
	OtherBackend string
}

// Explained reports whether a by-design difference accounts for the mismatch.
func (m Mismatch) Explained() bool { return len(m.Differences) > 0 }

func (m Mismatch) String() string {
	s := fmt.Sprintf("%s\n    %s: %s\n    %s: %s", m.Flow, Reference.Name, m.Ref, m.Mode, m.Got)
	if m.Scope != nil {
		s += fmt.Sprintf("\n    affinity: %s pinned the client to %s for this flow and %s; %s answered that one from %s",
			Reference.Name, m.Scope.Pinned, m.Scope.Other, m.Mode, m.Scope.OtherBackend)
	}
	if m.Explained() {
		s += "\n    by design: " + strings.Join(m.Differences, ", ")
	}
	return s
}

// Comparison is one case run under several modes.
type Comparison struct {
	Case  *proptest.Case
	Modes []string
	Flows int
	// Agreed counts (flow, mode) pairs whose every attempt the reference allows.
	Agreed int
	// Named counts, per by-design difference, the (flow, mode) pairs it explained (a pair
	// that several explain counts for each).
	Named map[string]int
	// Explained are those mismatches (the first of each pair); Unexplained fail the
	// suite.
	Explained, Unexplained []Mismatch
	// Worlds are the worlds the case ran in, by mode name (closed by Close).
	Worlds map[string]*proptest.World
	// Unconfirmed are unexplained mismatches of an earlier run of the case that this run
	// (a CompareConfirmed rerun) did not give. A case runs the same way every time in the
	// simulation, so these came from timing: a quiescence wait that ended while work was
	// still in flight, then a manual clock moved.
	Unconfirmed []Mismatch
}

// Close stops every world.
func (c *Comparison) Close() {
	for _, w := range c.Worlds {
		w.Close()
	}
}

// Attempts is how many times each flow is sent under each mode.
var Attempts = 3

// Compare builds the case under the reference mode and under each of modes, sends
// every flow of the reference world under each, and holds every attempt's outcome to
// the reference's possible outcomes (every branch of each flow's first packet, taken
// before any flow pins a client under affinity, and the reference's own attempts): the
// same class (answered, refused, dropped), and for an answer one of the backends the
// reference can reach, seeing the source as the reference's backend sees it. An outcome
// the reference cannot give is a Mismatch; a by-design difference (Differences) may
// explain it (the userspace mode's backends, for one, see the node, not the client:
// userspace-backends-see-the-node). The caller closes the comparison.
func Compare(c *proptest.Case, modes ...Mode) (*Comparison, error) {
	cmp := &Comparison{Case: c, Named: map[string]int{}, Worlds: map[string]*proptest.World{}}
	all := append([]Mode{Reference}, modes...)
	for _, m := range all {
		if _, dup := cmp.Worlds[m.Name]; dup {
			cmp.Close()
			return nil, fmt.Errorf("conformance: mode %q given twice", m.Name)
		}
		w, err := proptest.Build(c, m.Proxy)
		if err != nil {
			cmp.Close()
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		w.Mode, w.Semantics = m.Name, m.Semantics
		cmp.Worlds[m.Name] = w
		cmp.Modes = append(cmp.Modes, m.Name)
	}
	ref := cmp.Worlds[Reference.Name]
	if err := sameAddresses(ref, cmp); err != nil {
		cmp.Close()
		return nil, err
	}
	flows := Flows(ref)
	cmp.Flows = len(flows)
	refObs := make([]Observation, len(flows))
	for i, f := range flows {
		o, err := observeBranches(ref, f)
		if err != nil {
			cmp.Close()
			return nil, fmt.Errorf("%s: %w", Reference.Name, err)
		}
		refObs[i] = o
	}
	for i, f := range flows {
		if err := observeAttempts(ref, f, Attempts, &refObs[i]); err != nil {
			cmp.Close()
			return nil, fmt.Errorf("%s: %w", Reference.Name, err)
		}
	}
	scopes := AffinityScopes(flows)
	for _, m := range modes {
		w := cmp.Worlds[m.Name]
		gots := make([]Observation, len(flows))
		for i, f := range flows {
			got, err := Observe(w, f, Attempts)
			if err != nil {
				cmp.Close()
				return nil, fmt.Errorf("%s: %w", m.Name, err)
			}
			gots[i] = got
			var first *Mismatch
			for _, a := range got.Attempts {
				if refObs[i].has(a, false) {
					continue
				}
				mm := Mismatch{Flow: f, Mode: m.Name, Ref: refObs[i], Got: a}
				mm.Differences = Explain(ref, mm)
				if first == nil || first.Explained() && !mm.Explained() {
					first = &mm
				}
			}
			switch {
			case first == nil:
				cmp.Agreed++
			case first.Explained():
				for _, d := range first.Differences {
					cmp.Named[d]++
				}
				cmp.Explained = append(cmp.Explained, *first)
			default:
				cmp.Unexplained = append(cmp.Unexplained, *first)
			}
		}
		for _, g := range scopes {
			mm := scopeMismatch(m.Name, flows, g, refObs, gots)
			if mm == nil {
				continue
			}
			mm.Differences = Explain(ref, *mm)
			if mm.Explained() {
				for _, d := range mm.Differences {
					cmp.Named[d]++
				}
				cmp.Explained = append(cmp.Explained, *mm)
			} else {
				cmp.Unexplained = append(cmp.Unexplained, *mm)
			}
		}
	}
	return cmp, nil
}

// Reruns is how many more times CompareConfirmed runs a case whose comparison has
// unexplained mismatches.
var Reruns = 2

// CompareConfirmed is Compare, run again (up to Reruns more times) while the comparison
// has unexplained mismatches. A mismatch of the modes comes back on every run: the
// simulation is deterministic. One that does not come back came from timing in the
// harness; the first clean rerun is returned, with the mismatches it did not give in
// Unconfirmed.
func CompareConfirmed(c *proptest.Case, modes ...Mode) (*Comparison, error) {
	cmp, err := Compare(c, modes...)
	for i := 0; err == nil && len(cmp.Unexplained) > 0 && i < Reruns; i++ {
		again, err := Compare(c, modes...)
		if err != nil {
			cmp.Close()
			return nil, err
		}
		if len(again.Unexplained) == 0 {
			again.Unconfirmed = cmp.Unexplained
			cmp.Close()
			return again, nil
		}
		again.Close()
	}
	return cmp, err
}

// AffinityScopes groups the flows (indexes into flows) that kube-proxy's iptables mode
// pins to one endpoint together under ClientIP affinity: its recent lists are per
// service port (one per endpoint chain, shared by the cluster IP, external IPs and node
// ports of the port) and per node, keyed by the client's address. So a scope is the
// flows of a service port with ClientIP affinity from one client address whose
// endpoints are chosen by the same node's rules (the client's node; a node port's
// node) among the same endpoints (a traffic policy may give another set). Only scopes
// of two or more flows are returned; load-balancer flows (whose node the cloud load
// balancer picks) are left out.
func AffinityScopes(flows []Flow) [][]int {
	byKey := map[string][]int{}
	var keys []string
	for i, f := range flows {
		if f.View.Affinity() <= 0 {
			continue
		}
		node := f.Node
		switch f.Kind {
		case KindClusterIP, KindExternalIP:
		case KindNodePort, KindLocalhostNodePort:
			node = f.EntryNode
		default:
			continue
		}
		var eps []string
		for _, e := range expectation(f).Endpoints {
			eps = append(eps, e.Addr.String())
		}
		sort.Strings(eps)
		k := fmt.Sprintf("%s|%s|%s|%s", f.Client, node, f.View.Key(), strings.Join(eps, ","))
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	var out [][]int
	for _, k := range keys {
		if len(byKey[k]) > 1 {
			out = append(out, byKey[k])
		}
	}
	return out
}

// scopeMismatch holds a mode to the reference's affinity over one scope: when the
// reference answered every attempt of two or more of its flows from one backend, a mode
// that answered each of two flows of the scope from a single backend, but not the same
// one, gives a Mismatch with Scope set (a mode that does not keep a client on one
// backend within a flow is proptest's client-ip-affinity invariant's business).
func scopeMismatch(mode string, flows []Flow, g []int, refObs, gots []Observation) *Mismatch {
	pinned, answered := "", 0
	for _, i := range g {
		n := 0
		for _, a := range refObs[i].Attempts {
			if a.Class != Answered {
				continue
			}
			if pinned != "" && a.Backend != pinned {
				return nil
			}
			pinned, n = a.Backend, n+1
		}
		if n > 0 {
			answered++
		}
	}
	if answered < 2 {
		return nil
	}
	other, otherBackend := -1, ""
	for _, i := range g {
		b, ok := onlyBackend(gots[i])
		if !ok {
			continue
		}
		if other < 0 {
			other, otherBackend = i, b
			continue
		}
		if b != otherBackend {
			got := gots[i].Attempts[0]
			return &Mismatch{Flow: flows[i], Mode: mode, Ref: refObs[i], Got: got,
				Scope: &AffinityScope{Pinned: pinned, Other: flows[other], OtherBackend: otherBackend}}
		}
	}
	return nil
}

// onlyBackend returns the one backend that answered every attempt of an observation.
func onlyBackend(o Observation) (string, bool) {
	b := ""
	for _, a := range o.Attempts {
		if a.Class != Answered || b != "" && a.Backend != b {
			return "", false
		}
		b = a.Backend
	}
	return b, b != ""
}

// sameAddresses checks that every world allocated the same cluster IPs, node ports
// and load-balancer IPs as the reference (flows are computed once, in the reference).
func sameAddresses(ref *proptest.World, cmp *Comparison) error {
	want := addresses(ref)
	for name, w := range cmp.Worlds {
		if got := addresses(w); !reflect.DeepEqual(got, want) {
			return fmt.Errorf("conformance: the %s world allocated other addresses than the %s world:\n  %v\n  %v", name, Reference.Name, got, want)
		}
	}
	return nil
}

func addresses(w *proptest.World) []string {
	var out []string
	for _, v := range w.ServicePorts() {
		out = append(out, fmt.Sprintf("%s %s %d %v %v %v", v.Key(), v.ClusterIP, v.Port.NodePort, v.ExternalIPs, v.LoadBalancerIPs, v.ProxiedLoadBalancerIPs))
	}
	sort.Strings(out)
	return out
}

// Summary renders the comparison in one line.
func (c *Comparison) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "modes %s: %d flows, %d agreed", strings.Join(c.Modes, ", "), c.Flows, c.Agreed)
	var names []string
	for n := range c.Named {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "; %d %s", c.Named[n], n)
	}
	if len(c.Unexplained) > 0 {
		fmt.Fprintf(&b, "; %d unexplained", len(c.Unexplained))
	}
	return b.String()
}
