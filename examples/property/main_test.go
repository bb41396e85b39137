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
	// Shrunk: one node, one service, its one pod connecting to itself through it.
	if len(sc.Cluster.Nodes) != 1 || len(sc.Manifests) != 3 || sc.Steps[0].Connect.From != "pod:default/svc-0-0" {
		t.Errorf("the counterexample is not minimal:\n%s", yaml)
	}
	rep, err := scenario.Run(context.Background(), sc, scenario.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed || rep.Steps[0].Traffic.Results["dropped"] != 1 {
		t.Errorf("replaying the counterexample should fail with the connection dropped: %+v", rep.Steps[0])
	}
}
