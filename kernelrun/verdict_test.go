package kernelrun_test

import (
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/kernelrun"
	"github.com/clusterlab/clusterlab/scenario"
)

// TestExplainRandomDraws: a step whose only differences are which backends answered
// (and expectations on them) is the random-draws difference; one whose results or
// other expectations differ is not explained.
func TestExplainRandomDraws(t *testing.T) {
	step := func() *scenario.StepResult {
		return &scenario.StepResult{Index: 1, Action: "connect", Status: "ok", Traffic: &scenario.TrafficResult{Attempts: 10}}
	}
	sim, kern := &scenario.Report{}, &scenario.Report{}
	for _, tc := range []struct {
		name  string
		facts []scenario.Fact
		want  string
	}{
		{"backends", []scenario.Fact{{Name: "backends", ByBackend: map[string]string{"sim": "a, b, c", "kernel": "a, b"}}}, "random-draws"},
		{"reaches failed", []scenario.Fact{
			{Name: "backends", ByBackend: map[string]string{"sim": "a, b, c", "kernel": "a, b"}},
			{Name: "failed_expectations", ByBackend: map[string]string{"sim": "", "kernel": "reaches"}},
		}, "random-draws"},
		{"results", []scenario.Fact{{Name: "results", ByBackend: map[string]string{"sim": "connected=10", "kernel": "dropped=10"}}}, ""},
		{"result failed", []scenario.Fact{
			{Name: "backends", ByBackend: map[string]string{"sim": "a", "kernel": ""}},
			{Name: "failed_expectations", ByBackend: map[string]string{"sim": "", "kernel": "result"}},
		}, ""},
	} {
		s, k := step(), step()
		got := kernelrun.Explain(sim, kern)(s, k, &scenario.StepDifference{Index: 1, Facts: tc.facts})
		name, _, _ := strings.Cut(got, ":")
		if name != tc.want {
			t.Errorf("%s: Explain = %q, want %q", tc.name, got, tc.want)
		}
	}
}
