package scenario

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// EndpointExpect is one endpoint a check endpoints step expects in the Service's
// EndpointSlices (expect endpoints and endpoints_include). Fields not set are not
// compared.
type EndpointExpect struct {
	// Address is the endpoint's address (an IP) or pod:NS/NAME, the pod the endpoint
	// refers to (its targetRef; every address of a dual-stack pod). Required.
	Address string `yaml:"address"`
	// Port is a port of the endpoint's EndpointSlice (the target port the endpoint
	// serves: a named port resolved in the pod).
	Port int `yaml:"port,omitempty"`
	// Node is the endpoint's nodeName.
	Node string `yaml:"node,omitempty"`
	// Ready, Serving and Terminating are the endpoint's conditions (an unset ready or
	// serving counts as true, an unset terminating as false, as consumers read them).
	Ready       *bool `yaml:"ready,omitempty"`
	Serving     *bool `yaml:"serving,omitempty"`
	Terminating *bool `yaml:"terminating,omitempty"`
}

func (x EndpointExpect) String() string {
	parts := []string{x.Address}
	if x.Port != 0 {
		parts = append(parts, "port "+strconv.Itoa(x.Port))
	}
	if x.Node != "" {
		parts = append(parts, "on "+x.Node)
	}
	for _, c := range []struct {
		name string
		v    *bool
	}{{"ready", x.Ready}, {"serving", x.Serving}, {"terminating", x.Terminating}} {
		if c.v != nil {
			parts = append(parts, fmt.Sprintf("%s=%v", c.name, *c.v))
		}
	}
	return strings.Join(parts, " ")
}

// checkEndpointExpects validates expect endpoints and endpoints_include.
func checkEndpointExpects(st *Step, fail func(f, format string, args ...any)) {
	e := st.Expect
	isCheck := st.Check != nil && st.Check.Endpoints != nil
	for _, l := range []struct {
		name string
		list []EndpointExpect
	}{{"endpoints", e.Endpoints}, {"endpoints_include", e.EndpointsInclude}} {
		if l.list == nil {
			continue
		}
		if !isCheck {
			fail(l.name, "only check endpoints steps have %s", l.name)
			continue
		}
		for i, x := range l.list {
			f := fmt.Sprintf("%s[%d]", l.name, i)
			if _, err := netip.ParseAddr(x.Address); err != nil {
				ns, n, ok := strings.Cut(strings.TrimPrefix(x.Address, "pod:"), "/")
				if !strings.HasPrefix(x.Address, "pod:") || !ok || ns == "" || n == "" {
					fail(f+".address", "want an IP or pod:NAMESPACE/NAME, got %q", x.Address)
				}
			}
			if x.Port < 0 || x.Port > 65535 {
				fail(f+".port", "want 1-65535, got %d", x.Port)
			}
		}
	}
	if e.Endpoints != nil && e.EndpointsInclude != nil {
		fail("endpoints_include", "endpoints (exactly these) and endpoints_include (at least these): give one")
	}
}

// seenEndpoint is one address of a Service's EndpointSlices, with the ports of every
// slice it is in.
type seenEndpoint struct {
	addr        string
	pod         string // NS/NAME of its targetRef when that is a pod
	node        string
	ports       []int
	ready       bool
	serving     bool
	terminating bool
}

func (se *seenEndpoint) String() string {
	s := se.addr
	if se.pod != "" {
		s += " pod:" + se.pod
	}
	var ps []string
	for _, p := range se.ports {
		ps = append(ps, strconv.Itoa(p))
	}
	if len(ps) > 0 {
		s += " port " + strings.Join(ps, ",")
	}
	if se.node != "" {
		s += " on " + se.node
	}
	return s + fmt.Sprintf(" ready=%v serving=%v terminating=%v", se.ready, se.serving, se.terminating)
}

// seenEndpoints lists the addresses of slices, in order of first appearance.
func seenEndpoints(slices_ []*discoveryv1.EndpointSlice) []*seenEndpoint {
	var out []*seenEndpoint
	byAddr := map[string]*seenEndpoint{}
	for _, sl := range slices_ {
		var ports []int
		for _, p := range sl.Ports {
			if p.Port != nil {
				ports = append(ports, int(*p.Port))
			}
		}
		for _, ep := range sl.Endpoints {
			for _, a := range ep.Addresses {
				se := byAddr[a]
				if se == nil {
					se = &seenEndpoint{addr: a}
					c := ep.Conditions
					se.ready = c.Ready == nil || *c.Ready
					se.serving = c.Serving == nil || *c.Serving
					se.terminating = c.Terminating != nil && *c.Terminating
					if ep.NodeName != nil {
						se.node = *ep.NodeName
					}
					if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" {
						se.pod = ep.TargetRef.Namespace + "/" + ep.TargetRef.Name
					}
					byAddr[a] = se
					out = append(out, se)
				}
				for _, p := range ports {
					if !slices.Contains(se.ports, p) {
						se.ports = append(se.ports, p)
					}
				}
			}
		}
	}
	for _, se := range out {
		slices.Sort(se.ports)
	}
	return out
}

func (x EndpointExpect) matches(se *seenEndpoint) bool {
	if pod, ok := strings.CutPrefix(x.Address, "pod:"); ok {
		if se.pod != pod {
			return false
		}
	} else if a, err := netip.ParseAddr(x.Address); err != nil || se.addr != a.String() {
		return false
	}
	if x.Port != 0 && !slices.Contains(se.ports, x.Port) {
		return false
	}
	if x.Node != "" && se.node != x.Node {
		return false
	}
	for _, c := range []struct {
		want *bool
		got  bool
	}{{x.Ready, se.ready}, {x.Serving, se.serving}, {x.Terminating, se.terminating}} {
		if c.want != nil && *c.want != c.got {
			return false
		}
	}
	return true
}

// endpointExpectations compares a Service's endpoints with expect endpoints (every
// endpoint listed is there, and every endpoint there is listed) or endpoints_include
// (every endpoint listed is there).
func endpointExpectations(e *Expect, seen []*seenEndpoint) []Expectation {
	if e == nil {
		return nil
	}
	var got []string
	for _, se := range seen {
		got = append(got, se.String())
	}
	gotText := "[" + strings.Join(got, "; ") + "]"
	check := func(field string, want []EndpointExpect, exact bool) Expectation {
		var ws, missing, extra []string
		for _, x := range want {
			ws = append(ws, x.String())
			if !slices.ContainsFunc(seen, x.matches) {
				missing = append(missing, x.String())
			}
		}
		if exact {
			for _, se := range seen {
				if !slices.ContainsFunc(want, func(x EndpointExpect) bool { return x.matches(se) }) {
					extra = append(extra, se.String())
				}
			}
		}
		g := gotText
		if len(missing) > 0 {
			g += "; missing: " + strings.Join(missing, ", ")
		}
		if len(extra) > 0 {
			g += "; not expected: " + strings.Join(extra, ", ")
		}
		w := "[" + strings.Join(ws, "; ") + "]"
		if exact {
			w = "exactly " + w
		} else {
			w = "at least " + w
		}
		return Expectation{Field: field, Want: w, Got: g, OK: len(missing) == 0 && len(extra) == 0}
	}
	var out []Expectation
	if e.Endpoints != nil {
		out = append(out, check("endpoints", e.Endpoints, true))
	}
	if e.EndpointsInclude != nil {
		out = append(out, check("endpoints_include", e.EndpointsInclude, false))
	}
	return out
}
