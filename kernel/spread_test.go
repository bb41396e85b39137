package kernel

import (
	"math"
	"strings"
	"testing"
)

func results(counts map[string]int, other map[Outcome]int) []Result {
	var rs []Result
	for _, name := range sortedKeys(counts) {
		for range counts[name] {
			rs = append(rs, Result{Outcome: Answered, Server: name})
		}
	}
	for o, c := range other {
		for range c {
			rs = append(rs, Result{Outcome: o})
		}
	}
	return rs
}

func TestSpreadChiSquare(t *testing.T) {
	s := NewSpread(results(map[string]int{"a": 160, "b": 140}, map[Outcome]int{TimedOut: 3}))
	if s.Answered() != 300 || s.Outcomes[TimedOut] != 3 || s.String() != "a=160 b=140 timeout=3" {
		t.Errorf("spread %v (answered %d)", s, s.Answered())
	}
	// (160-150)²/150 + (140-150)²/150 = 4/3.
	chi, df, err := s.ChiSquare(map[string]float64{"a": 0.5, "b": 0.5})
	if err != nil || df != 1 || math.Abs(chi-4.0/3) > 1e-9 {
		t.Errorf("ChiSquare = %v, %d, %v; want 1.333, 1", chi, df, err)
	}
	// Probabilities are normalised: a model that drops 10% gives 0.45/0.45.
	if chi2, _, _ := s.ChiSquare(map[string]float64{"a": 0.45, "b": 0.45}); math.Abs(chi2-chi) > 1e-9 {
		t.Errorf("normalised chi %v, want %v", chi2, chi)
	}
	// A lopsided spread fails the p=1e-4 test.
	bad := NewSpread(results(map[string]int{"a": 220, "b": 80}, nil))
	if chi, df, _ := bad.ChiSquare(map[string]float64{"a": 0.5, "b": 0.5}); chi <= ChiSquareCritical(df) {
		t.Errorf("220/80 against 50/50: chi %v <= critical %v", chi, ChiSquareCritical(df))
	}
	// A zero-probability outcome counts no degree of freedom; a third server is 0 of 3.
	if _, df, err := s.ChiSquare(map[string]float64{"a": 0.5, "b": 0.5, "c": 0}); err != nil || df != 1 {
		t.Errorf("zero-probability server: df %d, %v", df, err)
	}
	if chi3, df, _ := s.ChiSquare(map[string]float64{"a": 1, "b": 1, "c": 1}); df != 2 || chi3 < 100 {
		t.Errorf("missing third server: chi %v df %d", chi3, df)
	}
	for _, want := range []map[string]float64{{"a": 1}, {"a": 0.5, "b": -0.5}, {}} {
		if _, _, err := s.ChiSquare(want); err == nil {
			t.Errorf("ChiSquare(%v): want an error", want)
		}
	}
	if _, _, err := NewSpread(nil).ChiSquare(map[string]float64{"a": 1}); err == nil || !strings.Contains(err.Error(), "nothing to compare") {
		t.Errorf("empty spread: %v", err)
	}
	if ChiSquareCritical(1) != 15.137 || ChiSquareCritical(2) != 18.421 || ChiSquareCritical(0) != 0 || ChiSquareCritical(11) != 0 {
		t.Error("ChiSquareCritical table")
	}
}
