package conformance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proptest"
	"github.com/clusterlab/clusterlab/scenario"

	"pgregory.net/rapid"
)

// Scenario writes the comparison's case as a scenario file that `clusterlab run
// --modes` replays: the reference world's case (objects with this run's addresses
// pinned, see proptest.World.Scenario) and, for the first unexplained mismatches, the
// traffic that showed them, as connect steps without expectations. Running it under
// the reference mode and the mismatching mode prints where they differ. Traffic to a
// mode that terminates connections (userspace) goes through real sockets (via:
// netstack), which every mode can then be compared on.
func (c *Comparison) Scenario() (*scenario.Scenario, error) {
	ref := c.Worlds[Reference.Name]
	if ref == nil {
		return nil, errors.New("conformance: the comparison has no reference world")
	}
	s, err := ref.Scenario(nil)
	if err != nil {
		return nil, err
	}
	modes := map[string]bool{Reference.Name: true}
	for _, m := range c.Unexplained {
		modes[m.Mode] = true
	}
	names := make([]string, 0, len(modes))
	for m := range modes {
		names = append(names, m)
	}
	sort.Strings(names)
	s.Name = "conformance counterexample: " + strings.Join(names, " vs ")
	s.Description = strings.Replace(s.Description, "Found by package proptest", "Found by package proptest/conformance", 1)
	s.Description += fmt.Sprintf("\nReplay with `clusterlab run --modes %s FILE`; each step below is a flow whose outcome differs.\n", strings.Join(names, ","))
	for i, m := range c.Unexplained {
		if i == proptest.MaxReproduced {
			break
		}
		s.Description += "\n" + m.String() + "\n"
		t := &scenario.Traffic{From: m.Flow.From, To: m.Flow.To, Count: Attempts}
		if m.Flow.Proto != netfilter.ProtoTCP {
			t.Proto = netsim.ProtoName(m.Flow.Proto)
		}
		if c.Worlds[m.Mode] != nil && c.Worlds[m.Mode].Semantics.Terminates {
			t.Via = "netstack"
		}
		s.Steps = append(s.Steps, scenario.Step{
			Name:    fmt.Sprintf("%s: %s %s", m.Mode, m.Flow.Kind, m.Flow.Service),
			Connect: t,
		})
	}
	return s, nil
}

// Property is the suite as a rapid property: draw a case with o, run it under the
// reference mode and modes (Modes() when none are given), and fail on any mismatch no
// by-design difference explains, logging the case, the mismatches and a scenario file
// that replays them (also written to $PROPTEST_SCENARIO_DIR when set). rapid shrinks the
// case first and prints the seed that reproduces it (-rapid.seed). A case with
// mismatches is run again (CompareConfirmed): only those that come back fail it, and
// those that did not are logged.
func Property(o proptest.Options, modes ...Mode) func(*rapid.T) {
	if len(modes) == 0 {
		modes = Modes()
	}
	return func(t *rapid.T) {
		c := proptest.Cases(o).Draw(t, "case")
		cmp, err := CompareConfirmed(c, modes...)
		if err != nil {
			t.Fatalf("compare: %v\ncase: %s", err, c.Summary())
		}
		defer cmp.Close()
		LogUnconfirmed(t, cmp)
		if len(cmp.Unexplained) > 0 {
			Report(t, cmp)
		}
	}
}

// LogUnconfirmed logs the mismatches a comparison's rerun did not give (Unconfirmed).
func LogUnconfirmed(t interface{ Logf(string, ...any) }, cmp *Comparison) {
	for _, m := range cmp.Unconfirmed {
		t.Logf("not confirmed by a rerun (timing in the harness, not a difference of the modes): %s\ncase: %s", m, cmp.Case.Summary())
	}
}

// Report fails t with the comparison's unexplained mismatches, the case and the
// scenario file that replays them.
func Report(t *rapid.T, cmp *Comparison) {
	t.Helper()
	t.Logf("case: %s", cmp.Case.Summary())
	t.Logf("%s", cmp.Summary())
	for _, m := range cmp.Unexplained {
		t.Logf("mismatch: %s", m)
	}
	if s, err := cmp.Scenario(); err != nil {
		t.Logf("no scenario file: %v", err)
	} else if data, err := s.Marshal(); err != nil {
		t.Logf("no scenario file: %v", err)
	} else {
		t.Logf("scenario (replay with `clusterlab run --modes ... FILE`):\n%s", data)
		if dir := os.Getenv(proptest.ScenarioDirEnv); dir != "" {
			path := filepath.Join(dir, "conformance.yaml")
			if err := os.MkdirAll(dir, 0o755); err == nil {
				err = os.WriteFile(path, data, 0o644)
			}
			if err != nil {
				t.Logf("writing the scenario: %v", err)
			} else {
				t.Logf("scenario written to %s", path)
			}
		}
	}
	// The message carries the first mismatch whole: when a failure does not come back on
	// replay, rapid prints only this message of the failing run, not its logs.
	t.Fatalf("%d flows differ from the %s mode with no by-design difference to explain them; first: %s",
		len(cmp.Unexplained), Reference.Name, cmp.Unexplained[0])
}
