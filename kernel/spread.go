package kernel

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Spread is what many connections to one destination did: how many each server
// answered, how many ended otherwise, and every Result in order. It is the kernel side
// of a differential test: compare Servers with the probabilities a model (an emulator's
// outcomes with their probabilities) gives, with ChiSquare.
//
//	h, _ := kernel.NewHarness(kernel.HarnessConfig{NFTables: true, Pods: ...})
//	_ = h.NFTables.Run(ctx, tx)                  // or ApplyScript(ctx, text)
//	s := h.DialSpread(h.Pod("client").Netns, "tcp", vip, 300, 8)
//	chi, df, err := s.ChiSquare(map[string]float64{"ep1": 0.5, "ep2": 0.5})
//	if err != nil || chi > kernel.ChiSquareCritical(df) { ... }
type Spread struct {
	Results  []Result
	Servers  map[string]int  // answered connections per server name
	Outcomes map[Outcome]int // every connection by outcome (Answered included)
}

// DialSpread makes n Dials from ns to dst (at most parallel at a time, as DialN) and
// counts them.
func (h *Harness) DialSpread(ns *Netns, proto string, dst netip.AddrPort, n, parallel int) Spread {
	return NewSpread(h.DialN(ns, proto, dst, n, parallel))
}

// NewSpread counts results.
func NewSpread(results []Result) Spread {
	s := Spread{Results: results, Servers: map[string]int{}, Outcomes: map[Outcome]int{}}
	for _, r := range results {
		s.Outcomes[r.Outcome]++
		if r.Outcome == Answered {
			s.Servers[r.Server]++
		}
	}
	return s
}

// Answered is the number of connections some server answered.
func (s Spread) Answered() int { return s.Outcomes[Answered] }

// String lists the counts, servers sorted: "ep1=151 ep2=149" and any other outcomes.
func (s Spread) String() string {
	var parts []string
	for _, name := range sortedKeys(s.Servers) {
		parts = append(parts, fmt.Sprintf("%s=%d", name, s.Servers[name]))
	}
	for o := Refused; o <= Failed; o++ {
		if c := s.Outcomes[o]; c > 0 {
			parts = append(parts, fmt.Sprintf("%v=%d", o, c))
		}
	}
	return strings.Join(parts, " ")
}

// ChiSquare is Pearson's statistic of the answered connections' spread over servers
// against want, each server's probability (they are normalised to sum 1, so the
// probabilities of the answered outcomes of a model that also drops some connections
// can be passed as they are). df is the degrees of freedom (servers with a non-zero
// probability, less one): compare chi with ChiSquareCritical(df). A server that
// answered but has no probability in want, no answered connection at all, or a
// negative probability, is an error: the kernel did what the model says cannot happen.
func (s Spread) ChiSquare(want map[string]float64) (chi float64, df int, err error) {
	for name, c := range s.Servers {
		if want[name] <= 0 {
			return 0, 0, fmt.Errorf("server %s answered %d connections but has no probability in %v", name, c, want)
		}
	}
	total := 0.0
	for name, p := range want {
		if p < 0 {
			return 0, 0, fmt.Errorf("server %s: negative probability %v", name, p)
		}
		total += p
	}
	n := float64(s.Answered())
	if n == 0 || total == 0 {
		return 0, 0, fmt.Errorf("nothing to compare: %d answered connections, probabilities %v", s.Answered(), want)
	}
	k := 0
	for _, name := range sortedKeys(want) {
		p := want[name] / total
		if p == 0 {
			continue
		}
		k++
		exp := p * n
		d := float64(s.Servers[name]) - exp
		chi += d * d / exp
	}
	return chi, k - 1, nil
}

// chiSquareCritical1e4 are the chi-square distribution's upper 1e-4 quantiles for 1 to
// 10 degrees of freedom: a spread that really follows the probabilities exceeds them
// once in ten thousand runs.
var chiSquareCritical1e4 = []float64{15.137, 18.421, 21.108, 23.513, 25.745, 27.856, 29.878, 31.828, 33.720, 35.564}

// ChiSquareCritical returns the critical value at p = 1e-4 for df degrees of freedom
// (1 to 10), the threshold the differential tests use; 0 for df out of range, so a
// test comparing chi > 0 fails rather than passing vacuously. (df 0: a single server
// takes every connection, which needs no statistic.)
func ChiSquareCritical(df int) float64 {
	if df < 1 || df > len(chiSquareCritical1e4) {
		return 0
	}
	return chiSquareCritical1e4[df-1]
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
