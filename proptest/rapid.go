package proptest

import (
	"os"

	"pgregory.net/rapid"
)

// Report fails a rapid property with err, which a check of w returned: it logs the case,
// the violations (each with its trace) and the scenario file that replays the
// counterexample. When $PROPTEST_SCENARIO_DIR is set it also writes the file there as
// proptest-<mode>.yaml (w.Mode; "proxy" when unset), overwriting it at every report: rapid
// reports each failing shrink step and the final shrunk case last, so one failing property
// leaves one file, the shrunk counterexample (give properties that may fail in the same
// run different modes). rapid prints the seed that reproduces it (-rapid.seed).
func Report(t *rapid.T, w *World, err error) {
	t.Helper()
	t.Logf("case: %s", w.Case.Summary())
	for _, n := range w.Notes {
		t.Logf("note: %s", n)
	}
	if data, serr := w.ScenarioYAML(err); serr != nil {
		t.Logf("no scenario file: %v", serr)
	} else {
		t.Logf("scenario (replay with `clusterlab run FILE`):\n%s", data)
		if dir := os.Getenv(ScenarioDirEnv); dir != "" {
			// One file per proxy label, overwritten: rapid reports every failing shrink
			// step and then the final, smallest case, so the file ends up holding the
			// shrunk counterexample (naming the file by the violated invariants left
			// one file per shrink step whose invariants differed).
			label := w.Mode
			if label == "" {
				label = "proxy"
			}
			if path, werr := writeScenario(dir, label, data); werr != nil {
				t.Logf("writing the scenario: %v", werr)
			} else {
				t.Logf("scenario written to %s", path)
			}
		}
	}
	mode := w.Mode
	if mode == "" {
		mode = "the proxy under test"
	}
	t.Fatalf("%s broke an invariant: %v", mode, err)
}

// MustBuild builds the case (see Build) or fails t.
func MustBuild(t *rapid.T, c *Case, proxyFor ProxyFor) *World {
	t.Helper()
	w, err := Build(c, proxyFor)
	if err != nil {
		t.Fatalf("build: %v\ncase: %s", err, c.Summary())
	}
	return w
}

// Property is the whole loop as a rapid property: draw a case with o, build it with
// proxyFor (mode labels it in messages), run the checkers (all of them when none is
// given) and Report what breaks.
//
//	func TestMyProxy(t *testing.T) {
//		rapid.Check(t, proptest.Property(proptest.Options{}, myProxy, "my-proxy"))
//	}
func Property(o Options, proxyFor ProxyFor, mode string, checks ...Checker) func(*rapid.T) {
	if len(checks) == 0 {
		checks = Checkers
	}
	return func(t *rapid.T) {
		c := Cases(o).Draw(t, "case")
		w := MustBuild(t, c, proxyFor)
		defer w.Close()
		if mode != "" {
			w.Mode = mode
			w.Semantics = SemanticsFor(mode)
		}
		if err := Check(w, checks...); err != nil {
			Report(t, w, err)
		}
	}
}
