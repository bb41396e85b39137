package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Comparison is the same scenario run under several proxy modes.
type Comparison struct {
	Modes   []string  `json:"modes"`
	Reports []*Report `json:"reports"`
	// Differences lists, step by step, the facts that differ between the modes.
	Differences []StepDifference `json:"differences"`
	// Passed says whether every mode's run passed.
	Passed bool `json:"passed"`
}

// StepDifference is one step whose outcome differs between modes.
type StepDifference struct {
	Index int    `json:"index"`
	Title string `json:"title"`
	// Facts maps each differing fact ("status", "results", "backends", "seen_source",
	// "answers", "count", "failed_expectations", "error") to its value per mode.
	Facts []Fact `json:"facts"`
}

// Fact is one fact of a step and its value under each mode.
type Fact struct {
	Name   string            `json:"name"`
	ByMode map[string]string `json:"by_mode"`
}

// RunModes runs the scenario under each mode, one after the other, and compares the
// outcomes step by step. Backend counts differ run to run by design (random choices), so
// a step's backends are compared as a set, and only for steps of 10 attempts or more
// (fewer are a draw among the backends) that reached more than one backend (which one
// a single backend is, under affinity say, is a draw too); results, seen sources, DNS answers, counts,
// statuses and failed expectations are compared as they are.
func RunModes(ctx context.Context, s *Scenario, modes []string, opts Options) (*Comparison, error) {
	if len(modes) == 0 {
		return nil, &Error{File: s.File, Field: "modes", Msg: "no modes given"}
	}
	seen := map[string]bool{}
	for _, m := range modes {
		if seen[m] {
			return nil, &Error{File: s.File, Field: "modes", Msg: fmt.Sprintf("mode %q is listed twice", m)}
		}
		seen[m] = true
		if _, err := s.prepare(m); err != nil {
			return nil, err
		}
	}
	cmp := &Comparison{Modes: modes, Passed: true}
	for _, m := range modes {
		o := opts
		o.Mode = m
		if opts.Progress != nil {
			mode := m
			o.Progress = func(step, total int, title string) { opts.Progress(step, total, mode+": "+title) }
		}
		rep, err := Run(ctx, s, o)
		if err != nil {
			return nil, err
		}
		cmp.Reports = append(cmp.Reports, rep)
		cmp.Passed = cmp.Passed && rep.Passed
	}
	for i := range cmp.Reports[0].Steps {
		var facts []Fact
		for _, name := range factNames {
			byMode := map[string]string{}
			vals := map[string]bool{}
			for j, rep := range cmp.Reports {
				if i >= len(rep.Steps) {
					continue
				}
				v := stepFact(&rep.Steps[i], name)
				byMode[modes[j]] = v
				vals[v] = true
			}
			if len(vals) > 1 {
				facts = append(facts, Fact{Name: name, ByMode: byMode})
			}
		}
		if len(facts) > 0 {
			st := cmp.Reports[0].Steps[i]
			cmp.Differences = append(cmp.Differences, StepDifference{Index: st.Index, Title: st.Title, Facts: facts})
		}
	}
	return cmp, nil
}

// minAttemptsForBackends is the fewest attempts whose set of backends is compared.
const minAttemptsForBackends = 10

var factNames = []string{"status", "results", "backends", "seen_source", "answers", "count", "failed_expectations", "error"}

func stepFact(st *StepResult, name string) string {
	switch name {
	case "status":
		return st.Status
	case "results":
		if st.Traffic != nil {
			return countsText(st.Traffic.Results)
		}
	case "backends":
		// A few attempts are a draw among the backends, not a property of the mode.
		if st.Traffic != nil && st.Traffic.Attempts >= minAttemptsForBackends {
			switch len(st.Traffic.Backends) {
			case 0:
				return "none"
			case 1:
				return "one backend" // which one is a draw
			}
			return strings.Join(sortedKeys(st.Traffic.Backends), ", ")
		}
	case "seen_source":
		if st.Traffic != nil {
			if len(st.Traffic.SeenSources) == 0 {
				return "none"
			}
			return strings.Join(sortedKeys(st.Traffic.SeenSources), ", ")
		}
	case "answers":
		if st.DNS != nil {
			a := append([]string(nil), st.DNS.Answers...)
			sort.Strings(a)
			return st.DNS.Rcode + " " + strings.Join(a, ", ")
		}
	case "count":
		if st.Count != nil {
			s := fmt.Sprint(*st.Count)
			if st.Ready != nil {
				s += fmt.Sprintf(" (%d ready)", *st.Ready)
			}
			return s
		}
	case "failed_expectations":
		var f []string
		for _, e := range st.Expectations {
			if !e.OK {
				f = append(f, e.Field)
			}
		}
		return strings.Join(f, ", ")
	case "error":
		return st.Error
	}
	return ""
}

// JSON returns the comparison as indented JSON.
func (c *Comparison) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteText writes each mode's report, then where the modes differ.
func (c *Comparison) WriteText(w io.Writer) error {
	var b strings.Builder
	for i, rep := range c.Reports {
		fmt.Fprintf(&b, "==== mode %s ====\n", c.Modes[i])
		if err := rep.WriteText(&b); err != nil {
			return err
		}
		b.WriteString("\n")
	}
	b.WriteString(c.DiffText())
	_, err := io.WriteString(w, b.String())
	return err
}

// DiffText is the part of the text output that says where the modes differ.
func (c *Comparison) DiffText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "==== where the modes differ (%s) ====\n", strings.Join(c.Modes, ", "))
	if len(c.Differences) == 0 {
		fmt.Fprintf(&b, "nowhere: every step has the same outcome under every mode\n")
	}
	for _, d := range c.Differences {
		fmt.Fprintf(&b, "[%d] %s\n", d.Index, d.Title)
		for _, f := range d.Facts {
			var parts []string
			for _, m := range c.Modes {
				v, ok := f.ByMode[m]
				if !ok {
					continue
				}
				if v == "" {
					v = "-"
				}
				parts = append(parts, m+": "+v)
			}
			fmt.Fprintf(&b, "      %s: %s\n", strings.ReplaceAll(f.Name, "_", " "), strings.Join(parts, " | "))
		}
	}
	var verdicts []string
	for i, rep := range c.Reports {
		v := "PASS"
		if !rep.Passed {
			v = fmt.Sprintf("FAIL (%d steps)", rep.Failed)
		}
		verdicts = append(verdicts, c.Modes[i]+" "+v)
	}
	fmt.Fprintf(&b, "\n%s\n", strings.Join(verdicts, ", "))
	return b.String()
}
