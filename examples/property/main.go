// Command property runs a property test built on clusterlab's property-testing kit
// (package proptest, on rapid): "every pod and node reaches every ClusterIP Service
// that has endpoints through its virtual IP, and can land on each of that Service's
// ready endpoints". The kit's generators draw the clusters (nodes, ClusterIP Services
// with one or two TCP/UDP ports, named or numeric targetPorts, affinity, traffic
// policies, selectorless Services with hand-written EndpointSlices, pods ready or not on
// random nodes, client pods); proptest.Build runs each on the simulated network under
// kube-proxy's iptables mode; the kit's cluster-ip-reachability checker probes every
// branch; and when the property fails, rapid shrinks the case and World.Scenario
// prints the counterexample as a scenario file that `clusterlab run` replays.
//
// With the bridge's hairpin mode on the property holds. With it off
// (proptest.Options.NoHairpin) it does not: a pod whose connection to its own Service is
// DNATed back to itself sends the packet out the bridge port it came in on, which a
// bridge without hairpin mode does not do.
//
// In your own code the property goes in a _test.go file as rapid.Check(t, property(...));
// main_test.go does exactly that.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/proptest"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

func main() {
	// rapid is made for go test: give it the testing flags it reads.
	testing.Init()
	flag.Parse()
	for k, v := range map[string]string{"rapid.checks": "40", "rapid.seed": "1"} {
		if err := flag.Set(k, v); err != nil {
			log.Fatal(err)
		}
	}
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) error {
	// The hairpin-off run fails on purpose: no rapid fail file for it (rapid would write
	// one under testdata/rapid and replay it first next time).
	if f := flag.Lookup("rapid.nofailfile"); f != nil {
		old := f.Value.String()
		if err := f.Value.Set("true"); err != nil {
			return err
		}
		defer f.Value.Set(old)
	}
	// Shrinking runs to its end, however busy the machine: rapid's default budget of 30 s
	// of wall-clock time cut it short under load and printed a counterexample that was
	// not the minimal one (the same case from the same seed, shrunk less).
	if f := flag.Lookup("rapid.shrinktime"); f != nil {
		old := f.Value.String()
		if err := f.Value.Set("1h"); err != nil {
			return err
		}
		defer f.Value.Set(old)
	}
	fmt.Fprintln(w, "property: every pod and node reaches every ClusterIP Service that has endpoints, and can land on each of its ready endpoints")
	for _, hairpin := range []bool{true, false} {
		var found []byte
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
		fmt.Fprintf(w, "---\n%s", found)
	}
	return nil
}

// options are the cases the property draws: ClusterIP Services only, IPv4, no changes
// after creation; hairpin mode as asked.
func options(hairpin bool) proptest.Options {
	return proptest.Options{Kinds: []proptest.ServiceKind{proptest.KindClusterIP}, NoDualStack: true, NoSteps: true, NoHairpin: !hairpin}
}

// property checks a generated cluster with the kit's cluster-ip-reachability checker;
// on failure it stores the case's scenario file in *found (the last failure rapid sees
// is the shrunk one) and reports it (proptest.Report: the case, the violations with
// their traces, the scenario).
func property(hairpin bool, found *[]byte) func(*rapid.T) {
	reach, ok := proptest.CheckerNamed(proptest.InvClusterIP)
	if !ok {
		panic("proptest has no " + proptest.InvClusterIP + " checker")
	}
	return func(t *rapid.T) {
		c := proptest.Cases(options(hairpin)).Draw(t, "case")
		w := proptest.MustBuild(t, c, proptest.KubeProxy(kubeproxy.IPTables))
		defer w.Close()
		w.Mode = string(kubeproxy.IPTables)
		if err := proptest.Check(w, reach); err != nil {
			if found != nil {
				data, serr := w.ScenarioYAML(err)
				if serr != nil {
					t.Fatalf("the counterexample as a scenario: %v", serr)
				}
				*found = data
			}
			proptest.Report(t, w, err)
		}
	}
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
