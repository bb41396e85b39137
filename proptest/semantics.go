package proptest

import "github.com/clusterlab/clusterlab/proxy/kubeproxy"

// Semantics are the behaviours in which proxy modes legitimately differ; the checkers
// hold a World to its Semantics. Each mode's are in its descriptor
// (kubeproxy.ModeInfo.Semantics); a proxy of your own is held to the reference mode's.
type Semantics = kubeproxy.Semantics

// adjust rewrites an expectation without endpoints to what the mode does.
func adjust(s Semantics, e Expect) Expect {
	switch {
	case e.Why == WhyNoLocalEndpoints && s.NoLocalEndpoints == "cluster":
		e.Endpoints, e.Verdict, e.Why = e.Fallback, "", ""
		e.Reason = "the cluster endpoints (" + s.Name + " uses them where a traffic policy of Local finds none on the node)"
		if e.External {
			e.MayDrop = true
			e.Reason += ", or lost: outside traffic reaches another node's pod unmasqueraded"
		}
		if len(e.Endpoints) == 0 {
			e.Verdict, e.Reason = "refused", "no destinations: the service port keeps no cluster endpoints (internalTrafficPolicy Local, no outside access)"
		}
	case e.Why == WhyNoLocalEndpoints && s.NoLocalEndpoints != "" && s.NoLocalEndpoints != e.Verdict:
		e.Verdict = s.NoLocalEndpoints
		e.Reason += " (" + s.Name + ": " + s.NoLocalEndpoints + ")"
	case e.Why == WhyNoEndpoints && s.NoEndpoints != "" && s.NoEndpoints != e.Verdict:
		e.Verdict = s.NoEndpoints
		e.Reason += " (" + s.Name + ": " + s.NoEndpoints + ")"
	}
	return e
}

// IPTablesSemantics are kube-proxy's iptables mode's: the reference mode's.
var IPTablesSemantics = kubeproxy.Reference().Semantics

// SemanticsFor returns the semantics of a kube-proxy mode by name (the reference
// mode's for names it does not know: a proxy of your own is held to kube-proxy's
// iptables behaviour).
func SemanticsFor(mode string) Semantics { return kubeproxy.SemanticsOf(mode) }
