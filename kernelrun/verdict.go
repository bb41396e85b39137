package kernelrun

import (
	"fmt"
	"strings"

	"github.com/clusterlab/clusterlab/scenario"
)

// Verdict implements scenario.Datapath: how the kernel back end takes each kind of step.
// It is called once before each step, and notes what a sync step asks of the kernel's
// kube-proxy (rules_only, hold_conntrack, clean_conntrack), which Sync does after it.
//
// Carried out on the kernel: connect and send (real sockets, the step's expectations),
// check conntrack (`conntrack -L` of the node). Control-plane steps run in the
// simulation and the kernel follows (pods started and stopped, rules re-programmed,
// settings written): apply, delete, delete_pod, kill_pod, set_ready, scale, evict,
// set_phase, update_status, restart_proxy, restart_apiserver, node_settings, check
// endpoints, sync (the kernel's rules change when the simulated kube-proxy syncs, so a
// pause or a delay holds them too; rules_only, hold_conntrack and clean_conntrack keep
// back and run the kernel's conntrack cleanup), set_health (readiness follows, listening is mirrored). Adapted, with a message: advance and at (waited for up to MaxWait),
// dns with dns: direct (answered in-process; with kube-dns the query goes from the pod
// to the CoreDNS pods' real servers through the kernel's rules), trace (no
// rule-by-rule trace on a kernel).
// Refused, with the reason: everything the kernel back end cannot do or mirror.
func (d *Datapath) Verdict(st *scenario.Step) scenario.DatapathVerdict {
	refuse := func(format string, args ...any) scenario.DatapathVerdict {
		return scenario.DatapathVerdict{Refuse: true, Message: fmt.Sprintf(format, args...)}
	}
	adapt := func(format string, args ...any) scenario.DatapathVerdict {
		return scenario.DatapathVerdict{Message: fmt.Sprintf(format, args...)}
	}
	var notes []string
	if st.At != nil {
		notes = append(notes, "at: the clock jump to it is waited for up to "+MaxWait.String())
	}
	for _, t := range []*scenario.Traffic{st.Connect, st.Send} {
		if t == nil {
			continue
		}
		switch {
		case t.Packet != nil:
			return refuse("a crafted packet is the simulation's (the kernel back end makes connections with sockets)")
		case t.AllBranches:
			return refuse("all_branches follows every random choice of one packet, which only the simulation can")
		case t.HTTP != nil:
			return refuse("the kernel's pods run echo servers (who answered, the source seen), not HTTP")
		case strings.EqualFold(t.Proto, "sctp"):
			return refuse("SCTP: the kernel back end's clients and servers speak TCP and UDP")
		case t.Via == "netstack" && st.Connect == nil:
			// A send via netstack is a connection too: fine.
		}
		if e := st.Expect; e != nil && e.DecidedBy != nil {
			notes = append(notes, "decided_by is not checked: it reads the simulation's rule-by-rule trace, which a kernel does not give")
		}
		if e := st.Expect; e != nil && e.Probabilities != nil {
			return refuse("probabilities need all_branches, the simulation's")
		}
		if t.Trace {
			notes = append(notes, "no rule-by-rule trace on a kernel (with --backend both the kernel's rules are kept for steps that differ)")
		}
	}
	switch {
	case st.DNS != nil && st.DNS.Together != nil:
		return refuse("together holds DNS packets in flight together in chosen interleavings, which only the simulation can")
	case st.DNS != nil && d.dnsSrv == nil:
		notes = append(notes, "answered in-process by the simulation's DNS (dns: direct; the kernel runs a DNS server only for kube-dns)")
	case st.Check != nil && st.Check.ConntrackStats != nil:
		return refuse("conntrack_stats reads the simulation's conntrack counters (the kernel's per-namespace counters are not read yet)")
	case st.Check != nil && st.Check.HealthCheck != nil:
		return refuse("the health-check node port is served by the simulation's kube-proxy; no kube-proxy process runs on the kernel nodes")
	case st.SetHealth != nil:
		notes = append(notes, "the simulation's probes see the new health and decide readiness, which the kernel's rules follow; a pod that stops listening stops its echo servers on the kernel too")
	case st.Fault != nil:
		return refuse("faults (loss, latency, duplication, reordering) need tc netem on the kernel's links, which the kernel back end does not set up")
	case st.Partition != nil:
		return refuse("partitions are the simulation's fabric (the kernel back end's node network is one bridge)")
	case st.Heal:
		return refuse("heal undoes a partition, which the kernel back end does not make")
	case st.KillNode != "":
		return refuse("kill_node stops a node with its pods in the simulation; the kernel back end does not take node namespaces down")
	case st.Sync != nil:
		// The kernel's rules follow the simulated kube-proxy's syncs (syncNode):
		// pause, resume, delay and now need nothing more.
		sy := st.Sync
		for _, w := range []struct {
			name string
			set  func(n *node)
		}{{sy.RulesOnly, func(n *node) { n.rulesOnly = true }}, {sy.HoldConntrack, func(n *node) { n.holding, n.ct.hold = true, true }},
			{sy.CleanConntrack, func(n *node) { n.clean = true }}} {
			if w.name == "" {
				continue
			}
			for _, n := range d.order {
				if w.name == "all" || w.name == n.name {
					w.set(n)
				}
			}
		}
	case st.Advance != nil && st.Advance.D() > MaxWait:
		notes = append(notes, fmt.Sprintf("a jump of %s is longer than the %v the kernel back end waits for", st.Advance, MaxWait))
	}
	return adapt("%s", strings.Join(notes, "; "))
}

// Difference is a known way the kernel back end's outcome of a step differs from the
// simulation's by design: not a bug of either.
type Difference struct {
	Name string
	Doc  string
}

// Differences are the named by-design differences between the back ends. The
// conformance suite's named differences (proptest/conformance.Differences) are between
// kube-proxy modes; both back ends run the same mode, so those do not arise here.
var Differences = []Difference{
	{"refused-on-the-kernel", "the kernel back end refused the step (its message says why): it ran in the simulation only"},
	{"after-a-refused-step", "an earlier step that changes the cluster was refused on the kernel, so from there on the kernel's cluster is not the simulation's"},
	{"random-draws", "which endpoint iptables' statistic match, IPVS or nftables' numgen picks is the kernel's random draw and the simulation's seeded one: which backends a few attempts reach, and their spread, differ between runs"},
	{"clock-jump-not-waited", "an earlier advance (or at) was longer than the kernel back end waits for: the simulation's conntrack entries and affinity timed out, the kernel's did not"},
}

// Explain names the by-design difference that accounts for step i's differences in a
// comparison of sim and kern (CompareBackends), with the detail; "" when none does.
func Explain(sim, kern *scenario.Report) func(s, k *scenario.StepResult, d *scenario.StepDifference) string {
	return func(s, k *scenario.StepResult, d *scenario.StepDifference) string {
		if k.Status == "refused" {
			return "refused-on-the-kernel: " + strings.TrimPrefix(k.Summary, "refused on the kernel: ")
		}
		i := k.Index - 1
		for j := 0; j < i && j < len(kern.Steps); j++ {
			if kern.Steps[j].Status == "refused" && changesCluster(kern.Steps[j].Action) {
				return fmt.Sprintf("after-a-refused-step: step %d (%s) was refused on the kernel", kern.Steps[j].Index, kern.Steps[j].Title)
			}
		}
		for j := 0; j < i && j < len(kern.Steps); j++ {
			for _, det := range kern.Steps[j].Details {
				if strings.Contains(det, "not waited for") {
					return fmt.Sprintf("clock-jump-not-waited: step %d (%s)", kern.Steps[j].Index, kern.Steps[j].Title)
				}
			}
		}
		if randomOnly(s, k, d) {
			return "random-draws: the same results; only which backends were drawn (or their spread) differs"
		}
		return ""
	}
}

// changesCluster says whether a step of this action changes the cluster (so that a
// refusal puts the kernel's cluster apart from the simulation's).
func changesCluster(action string) bool {
	switch action {
	case "connect", "send", "dns", "check", "advance":
		return false
	}
	return true
}

// randomOnly: the step's results agree and the differences are which backends answered
// and the expectations on them (backends, spread).
func randomOnly(s, k *scenario.StepResult, d *scenario.StepDifference) bool {
	if s.Traffic == nil || k.Traffic == nil {
		return false
	}
	for _, f := range d.Facts {
		switch f.Name {
		case "backends", "status":
		case "failed_expectations":
			for _, l := range []string{"sim", "kernel"} {
				for _, e := range strings.Split(f.Value(l), ", ") {
					switch e {
					case "", "backends", "spread", "reaches":
					default:
						return false
					}
				}
			}
		default:
			return false
		}
	}
	return true
}
