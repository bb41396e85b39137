// Command property runs a property test with rapid (pgregory.net/rapid) against the
// simulated cluster: "every pod reaches every ClusterIP Service that has endpoints
// through its virtual IP, and lands on one of that Service's pods". rapid generates
// clusters (nodes, Services, pods on random nodes), and when the property fails it
// shrinks the cluster to a minimal counterexample, which the program prints as a
// scenario file that `clusterlab run` replays.
//
// With the bridge's hairpin mode on the property holds. With it off it does not: a pod
// whose connection to its own Service is DNATed back to itself sends the packet out the
// bridge port it came in on, which a bridge without hairpin mode does not do.
//
// In your own code the property goes in a _test.go file as rapid.Check(t, property(...));
// main_test.go does exactly that.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/scenario"
	"github.com/clusterlab/clusterlab/service"
)

func main() {
	// rapid is made for go test: give it the testing flags it reads.
	testing.Init()
	flag.Parse()
	for k, v := range map[string]string{"rapid.checks": "40", "rapid.seed": "1", "rapid.nofailfile": "true"} {
		if err := flag.Set(k, v); err != nil {
			log.Fatal(err)
		}
	}
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) error {
	fmt.Fprintln(w, "property: every pod reaches every ClusterIP Service that has endpoints, and lands on one of its pods")
	for _, hairpin := range []bool{true, false} {
		var found *scenario.Scenario
		rep := &reporter{}
		rapid.Check(rep, property(hairpin, &found))
		fmt.Fprintf(w, "\nbridge hairpin mode %v: ", map[bool]string{true: "on", false: "off"}[hairpin])
		if !rep.failed {
			fmt.Fprintln(w, "the property holds ("+strings.TrimPrefix(rep.last, "[rapid] ")+")")
			continue
		}
		fmt.Fprintln(w, "the property fails; rapid shrank the counterexample to this scenario:")
		if found == nil {
			return fmt.Errorf("rapid failed without a counterexample: %s", rep.last)
		}
		text, err := found.Marshal()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "---\n%s", text)
	}
	return nil
}

// gen is one generated cluster.
type gen struct {
	nodes    []string
	services []int      // pods per service
	place    [][]string // node of each pod, per service
	client   string     // node of the client pod
}

func draw(t *rapid.T) gen {
	var g gen
	n := rapid.IntRange(1, 3).Draw(t, "nodes")
	for i := 0; i < n; i++ {
		g.nodes = append(g.nodes, fmt.Sprintf("node-%c", 'a'+i))
	}
	s := rapid.IntRange(1, 3).Draw(t, "services")
	for i := 0; i < s; i++ {
		k := rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("pods of svc-%d", i))
		g.services = append(g.services, k)
		var place []string
		for j := 0; j < k; j++ {
			place = append(place, rapid.SampledFrom(g.nodes).Draw(t, fmt.Sprintf("node of svc-%d-%d", i, j)))
		}
		g.place = append(g.place, place)
	}
	g.client = rapid.SampledFrom(g.nodes).Draw(t, "node of the client")
	return g
}

// objects are the generated cluster's Services and pods.
func (g gen) objects() (svcs []*corev1.Service, pods []*corev1.Pod) {
	for i, k := range g.services {
		name := fmt.Sprintf("svc-%d", i)
		svcs = append(svcs, service.NewService("default/"+name, service.Selector("app="+name), service.Port("", 80, 8080)))
		for j := 0; j < k; j++ {
			pods = append(pods, service.NewPod(fmt.Sprintf("default/%s-%d", name, j), service.Labels("app="+name),
				service.ContainerPort("", 8080, corev1.ProtocolTCP), service.OnNode(g.place[i][j])))
		}
	}
	pods = append(pods, service.NewPod("default/client", service.OnNode(g.client)))
	return svcs, pods
}

// property checks a generated cluster; on failure it stores the case as a scenario in
// *found (the last failure rapid sees is the shrunk one).
func property(hairpin bool, found **scenario.Scenario) func(*rapid.T) {
	return func(t *rapid.T) {
		g := draw(t)
		settings := netsim.DefaultNodeSettings()
		settings.Hairpin = hairpin
		var nodes []netsim.NodeConfig
		for _, n := range g.nodes {
			st := settings
			nodes = append(nodes, netsim.NodeConfig{Name: n, Settings: &st})
		}
		c, err := netsim.New(netsim.Config{Seed: 1, ManualClock: true, Nodes: nodes,
			Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables})})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		svcs, pods := g.objects()
		var objs []runtime.Object
		for _, s := range svcs {
			objs = append(objs, s)
		}
		for _, p := range pods {
			objs = append(objs, p)
		}
		if err := c.Apply(objs...); err != nil {
			t.Fatal(err)
		}
		for i, k := range g.services {
			if k == 0 {
				continue
			}
			name := fmt.Sprintf("svc-%d", i)
			svc, _ := c.Store().GetService("default", name)
			vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
			for _, p := range pods {
				from := "pod:default/" + p.Name
				r, err := c.ProbeOne(netsim.Probe{From: from, Proto: netsim.ProtoTCP, Dst: vip, Mode: netsim.ProbeConnect})
				if err != nil {
					t.Fatal(err)
				}
				if r.Result != netsim.ResultConnected || !strings.HasPrefix(r.Pod, "default/"+name+"-") {
					if found != nil {
						*found = counterexample(g, hairpin, from, name)
					}
					t.Fatalf("%s -> %s (%s): %s", from, name, vip, r.Outcome)
				}
			}
		}
	}
}

// counterexample writes a failing case as a scenario: the cluster, its objects, and the
// connection that failed, expected to succeed.
func counterexample(g gen, hairpin bool, from, svc string) *scenario.Scenario {
	s := &scenario.Scenario{
		Name:        "counterexample: " + from + " to " + svc,
		Description: "Shrunk by rapid from examples/property. Expect the connection to fail while hairpin mode is off.",
	}
	off := hairpin
	s.Cluster.NodeSettings = &scenario.NodeSettings{Hairpin: &off}
	s.Cluster.DNS = "off"
	s.Cluster.Proxy.Mode = "iptables"
	for _, n := range g.nodes {
		s.Cluster.Nodes = append(s.Cluster.Nodes, scenario.Node{Name: n})
	}
	svcs, pods := g.objects()
	for _, o := range svcs {
		s.Manifests = append(s.Manifests, scenario.MustInlineObject(o))
	}
	for _, o := range pods {
		s.Manifests = append(s.Manifests, scenario.MustInlineObject(o))
	}
	s.Steps = append(s.Steps, scenario.Step{
		Name:    from + " reaches " + svc,
		Connect: &scenario.Traffic{From: from, To: "service:default/" + svc + ":80"},
		Expect:  &scenario.Expect{Result: "connected", Reaches: []string{"default/" + svc + "-*"}},
	})
	return s
}

// reporter is the testing.TB rapid reports to when it runs outside go test.
type reporter struct {
	failed bool
	last   string
}

func (r *reporter) Helper()                         {}
func (r *reporter) Name() string                    { return "property" }
func (r *reporter) Logf(format string, args ...any) { r.last = fmt.Sprintf(format, args...) }
func (r *reporter) Log(args ...any)                 { r.last = fmt.Sprint(args...) }
func (r *reporter) Skipf(format string, args ...any) {
	r.last = fmt.Sprintf(format, args...)
}
func (r *reporter) Skip(args ...any) { r.last = fmt.Sprint(args...) }
func (r *reporter) SkipNow()         {}
func (r *reporter) Errorf(format string, args ...any) {
	r.failed, r.last = true, fmt.Sprintf(format, args...)
}
func (r *reporter) Error(args ...any)                 { r.failed, r.last = true, fmt.Sprint(args...) }
func (r *reporter) Fatalf(format string, args ...any) { r.Errorf(format, args...) }
func (r *reporter) Fatal(args ...any)                 { r.Error(args...) }
func (r *reporter) FailNow()                          { r.failed = true }
func (r *reporter) Fail()                             { r.failed = true }
func (r *reporter) Failed() bool                      { return r.failed }
