package scenario

import (
	"strings"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netpol"
	"github.com/clusterlab/clusterlab/netsim"
)

// policyDecisions are the NetworkPolicy handler's decisions on a trace, in order.
func policyDecisions(tr *netsim.Trace) []*netpol.Decision {
	if tr == nil {
		return nil
	}
	var out []*netpol.Decision
	for _, s := range tr.Steps {
		if pt, ok := s.Decision.(*cluster.PolicyTrace); ok && s.Handler == cluster.PolicyHandlerName {
			out = append(out, &pt.Decision)
		}
	}
	return out
}

// checkPolicyDecision is decided_by: {network_policy: NS/NAME}: the packet's trace has
// a NetworkPolicy decision by that policy (a deny among whose isolating policies it is,
// or an allow by one of its rules, whose text contains Rule).
func checkPolicyDecision(w *DecisionPoint, tr *netsim.Trace) Expectation {
	ex := Expectation{Field: "decided_by", Want: w.String(), Got: "no NetworkPolicy decided"}
	var got []string
	for _, d := range policyDecisions(tr) {
		if !d.Isolated {
			continue
		}
		got = append(got, d.String())
		switch {
		case !d.Allowed:
			for _, r := range d.Selecting {
				if r.String() == w.NetworkPolicy && w.Rule == "" {
					ex.OK = true
				}
			}
		case d.Rule != nil && d.Rule.Policy.String() == w.NetworkPolicy:
			if strings.Contains(d.Rule.String(), w.Rule) {
				ex.OK = true
			}
		}
	}
	if len(got) > 0 {
		ex.Got = strings.Join(got, "; ")
	}
	return ex
}
