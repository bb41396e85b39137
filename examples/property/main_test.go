package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/scenario"
)

// TestPropertyWithHairpin is the property as it goes in a test file.
func TestPropertyWithHairpin(t *testing.T) {
	rapid.Check(t, property(true, nil))
}

// TestRun runs the program: the property holds with hairpin mode on; with it off, rapid
// finds and shrinks a counterexample, printed as a scenario that fails as it says.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "bridge hairpin mode on: the property holds (OK, passed") {
		t.Errorf("with hairpin mode on the property should hold:\n%s", s)
	}
	_, yaml, ok := strings.Cut(s, "bridge hairpin mode off: the property fails; rapid shrank the counterexample to this scenario:\n---\n")
	if !ok {
		t.Fatalf("with hairpin mode off the property should fail:\n%s", s)
	}
	sc, err := scenario.Parse("counterexample.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("the counterexample is not a valid scenario: %v\n%s", err, yaml)
	}
	// Shrunk: one node, one service, its one pod and a client pod (a case always has
	// one); the step is the pod's own packet to the service, expected to reach it.
	if len(sc.Cluster.Nodes) != 1 || len(sc.Manifests) != 3 || len(sc.Steps) != 1 || sc.Steps[0].Send == nil ||
		sc.Steps[0].Send.From != "pod:default/svc-0-0" || sc.Cluster.NodeSettings == nil || sc.Cluster.NodeSettings.Hairpin == nil || *sc.Cluster.NodeSettings.Hairpin {
		t.Errorf("the counterexample is not minimal, or not with hairpin mode off:\n%s", yaml)
	}
	rep, err := scenario.Run(context.Background(), sc, scenario.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed || rep.Steps[0].Traffic == nil || rep.Steps[0].Traffic.Results["dropped"] == 0 {
		var b bytes.Buffer
		rep.WriteText(&b)
		t.Errorf("replaying the counterexample should fail with the packet dropped:\n%s", b.String())
	}
}
