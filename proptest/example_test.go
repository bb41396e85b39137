package proptest_test

import (
	"errors"
	"fmt"

	"github.com/clusterlab/clusterlab/proptest"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// The kit's loop without rapid.Check: draw a case (Generator.Example draws one from a
// seed), build it under kube-proxy's iptables mode, check every invariant; then the
// same case on nodes whose bridge has hairpin mode off, where a pod no longer reaches
// itself through its own Service, and the counterexample as a scenario file. In a test,
// rapid.Check(t, proptest.Property(...)) does all of this and shrinks the case.
func Example() {
	o := proptest.Options{MaxNodes: 1, Kinds: []proptest.ServiceKind{proptest.KindClusterIP}, NoDualStack: true, NoSteps: true}
	c := proptest.Cases(o).Example(6)
	fmt.Println("case:", c.Summary())

	w, err := proptest.Build(c, proptest.KubeProxy(kubeproxy.IPTables))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("iptables, every invariant:", proptest.CheckAll(w))
	w.Close()

	c.Cluster.NoHairpin = true
	w, err = proptest.Build(c, proptest.KubeProxy(kubeproxy.IPTables))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	reach, _ := proptest.CheckerNamed(proptest.InvClusterIP)
	err = proptest.Check(w, reach)
	var vs proptest.Violations
	if errors.As(err, &vs) {
		fmt.Println("hairpin off, broken:", vs.Invariants())
		fmt.Println("first probe:", vs[0].Probe.From, "->", vs[0].Service)
	}
	s, err := w.Scenario(err)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("scenario:", s.Name)
	for _, st := range s.Steps {
		fmt.Println("  step:", st.Name)
	}
	// Output:
	// case: 1 nodes nodeport-addresses=primary; services svc-0(ClusterIP 80/UDP->web iTP=Local); pods svc-0-0@node-a svc-0-1@node-a,not-ready client-0@node-a
	// iptables, every invariant: <nil>
	// hairpin off, broken: [cluster-ip-reachability]
	// first probe: pod:default/svc-0-0 -> default/svc-0 (80/UDP, IPv4)
	// scenario: proptest counterexample: cluster-ip-reachability
	//   step: cluster-ip-reachability: send pod:default/svc-0-0 -> 10.111.59.225:80/udp
}
