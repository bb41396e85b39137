package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Comparison is the same scenario run under several proxy modes (RunModes) or several
// kube-proxy versions (RunVersions).
type Comparison struct {
	// Modes or Versions are the runs' labels, in order; one of them is set.
	Modes    []string `json:"modes,omitempty"`
	Versions []string `json:"versions,omitempty"`
	// Backends are the data paths of a run on several (CompareBackends): "sim" and
	// "kernel".
	Backends []string  `json:"backends,omitempty"`
	Reports  []*Report `json:"reports"`
	// Differences lists, step by step, the facts that differ between the runs.
	Differences []StepDifference `json:"differences"`
	// Passed says whether every run passed.
	Passed bool `json:"passed"`
}

// StepDifference is one step whose outcome differs between modes or versions.
type StepDifference struct {
	Index int    `json:"index"`
	Title string `json:"title"`
	// Facts maps each differing fact ("status", "results", "reasons", "backends",
	// "seen_source", "answers", "count", "failed_expectations", "error") to its value
	// per mode or version.
	Facts []Fact `json:"facts"`
	// ByDesign names the known difference between the back ends that accounts for
	// this one, with why (CompareBackends); "" when none does.
	ByDesign string `json:"by_design,omitempty"`
	// DatapathState is the kernel's rules and conntrack after the step (CompareBackends).
	DatapathState []NodeState `json:"datapath_state,omitempty"`
}

// Fact is one fact of a step and its value under each mode (ByMode) or each version
// (ByVersion).
type Fact struct {
	Name      string            `json:"name"`
	ByMode    map[string]string `json:"by_mode,omitempty"`
	ByVersion map[string]string `json:"by_version,omitempty"`
	ByBackend map[string]string `json:"by_backend,omitempty"`
}

// values is the fact's value per label, whichever axis it is on.
func (f *Fact) values() map[string]string {
	switch {
	case f.ByVersion != nil:
		return f.ByVersion
	case f.ByBackend != nil:
		return f.ByBackend
	}
	return f.ByMode
}

// Value is the fact's value under a label (a mode, version or back end).
func (f *Fact) Value(label string) string { return f.values()[label] }

// CompareBackends compares a run on the simulation with a run of the same scenario on
// another data path (Options.Datapath), step by step as RunModes does. explain, when
// set, names the known by-design difference that accounts for a step's differences
// ("" for none). Each differing step keeps the data path's state after it (when the
// run kept it: Options.DatapathState), in Differences; the reports' steps keep none.
func CompareBackends(sim, other *Report, explain func(sim, other *StepResult, d *StepDifference) string) *Comparison {
	labels := []string{"sim", other.Backend}
	c := &Comparison{Backends: labels, Reports: []*Report{sim, other}}
	c.compare(labels, false)
	c.Backends = labels
	// Why an attempt failed is the simulation's rule-by-rule account on one side and
	// what the client's socket saw on the other: not comparable (results are).
	kept := c.Differences[:0]
	for _, d := range c.Differences {
		facts := d.Facts[:0]
		for _, f := range d.Facts {
			if f.Name != "reasons" {
				facts = append(facts, f)
			}
		}
		if d.Facts = facts; len(facts) > 0 {
			kept = append(kept, d)
		}
	}
	c.Differences = kept
	for i := range c.Differences {
		d := &c.Differences[i]
		for j := range d.Facts {
			f := &d.Facts[j]
			f.ByBackend, f.ByMode = f.ByMode, nil
		}
		k := d.Index - 1
		if k < len(other.Steps) {
			d.DatapathState = other.Steps[k].DatapathState
			if explain != nil && k < len(sim.Steps) {
				d.ByDesign = explain(&sim.Steps[k], &other.Steps[k], d)
			}
		}
	}
	for i := range other.Steps {
		other.Steps[i].DatapathState = nil // the differing steps' are in Differences
	}
	return c
}

// RunModes runs the scenario under each mode, one after the other, and compares the
// outcomes step by step. Backend counts differ run to run by design (random choices), so
// a step's backends are compared as a set, and only for steps of 10 attempts or more
// (fewer are a draw among the backends) that reached more than one backend (which one
// a single backend is, under affinity say, is a draw too); results, why attempts
// failed (as a kind of reason: a rule's drop or reject, a routing failure, ...), seen
// sources, DNS answers, counts, statuses and failed expectations are compared as they are.
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
		o := opts
		o.Mode = m
		if _, err := s.prepareFor(o); err != nil {
			return nil, err
		}
	}
	reps, err := runEach(ctx, s, modes, opts, func(o *Options, m string) { o.Mode = m })
	if err != nil {
		return nil, err
	}
	cmp := &Comparison{Modes: modes, Reports: reps}
	cmp.compare(modes, false)
	return cmp, nil
}

// RunVersions runs the scenario under each kube-proxy version ("1.28"), one after the
// other, in the scenario's mode (or opts.Mode), and compares the outcomes step by step
// as RunModes does. A version the mode is not modelled in is the scenario's error
// (naming the releases it is modelled in), before anything runs.
func RunVersions(ctx context.Context, s *Scenario, versions []string, opts Options) (*Comparison, error) {
	if len(versions) == 0 {
		return nil, &Error{File: s.File, Field: "versions", Msg: "no versions given"}
	}
	seen := map[string]bool{}
	var labels []string
	for _, v := range versions {
		o := opts
		o.Version = v
		p, err := s.prepareFor(o)
		if err != nil {
			return nil, err
		}
		if seen[p.version] {
			return nil, &Error{File: s.File, Field: "versions", Msg: fmt.Sprintf("version %s is listed twice", p.version)}
		}
		seen[p.version] = true
		labels = append(labels, p.version)
	}
	reps, err := runEach(ctx, s, labels, opts, func(o *Options, v string) { o.Version = v })
	if err != nil {
		return nil, err
	}
	cmp := &Comparison{Versions: labels, Reports: reps}
	cmp.compare(labels, true)
	return cmp, nil
}

// runEach runs the scenario once per label, set sets the label into the options.
func runEach(ctx context.Context, s *Scenario, labels []string, opts Options, set func(*Options, string)) ([]*Report, error) {
	var reps []*Report
	for _, l := range labels {
		o := opts
		set(&o, l)
		if opts.Progress != nil {
			label := l
			o.Progress = func(step, total int, title string) { opts.Progress(step, total, label+": "+title) }
		}
		rep, err := Run(ctx, s, o)
		if err != nil {
			return nil, err
		}
		reps = append(reps, rep)
	}
	return reps, nil
}

// compare fills Passed and Differences from the reports, one per label.
func (c *Comparison) compare(labels []string, byVersion bool) {
	c.Passed = true
	for _, rep := range c.Reports {
		c.Passed = c.Passed && rep.Passed
	}
	for i := range c.Reports[0].Steps {
		var facts []Fact
		for _, name := range factNames {
			byLabel := map[string]string{}
			vals := map[string]bool{}
			for j, rep := range c.Reports {
				if i >= len(rep.Steps) {
					continue
				}
				v := stepFact(&rep.Steps[i], name)
				byLabel[labels[j]] = v
				vals[v] = true
			}
			if len(vals) > 1 {
				f := Fact{Name: name, ByMode: byLabel}
				if byVersion {
					f = Fact{Name: name, ByVersion: byLabel}
				}
				facts = append(facts, f)
			}
		}
		if len(facts) > 0 {
			st := c.Reports[0].Steps[i]
			c.Differences = append(c.Differences, StepDifference{Index: st.Index, Title: st.Title, Facts: facts})
		}
	}
}

// labels are the runs' labels and what they are ("mode" or "version").
func (c *Comparison) labels() ([]string, string) {
	if c.Versions != nil {
		return c.Versions, "version"
	}
	if c.Backends != nil {
		return c.Backends, "back end"
	}
	return c.Modes, "mode"
}

// minAttemptsForBackends is the fewest attempts whose set of backends is compared.
const minAttemptsForBackends = 10

var factNames = []string{"status", "results", "reasons", "backends", "seen_source", "answers", "count", "failed_expectations", "error"}

func stepFact(st *StepResult, name string) string {
	switch name {
	case "status":
		return st.Status
	case "results":
		if st.Traffic != nil {
			return countsText(st.Traffic.Results)
		}
	case "reasons":
		if st.Traffic != nil && len(st.Traffic.Reasons) > 0 {
			kinds := map[string]int{}
			for r, n := range st.Traffic.Reasons {
				kinds[ReasonKind(r)] += n
			}
			return countsText(kinds)
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

// WriteText writes each run's report, then where the modes (or versions) differ.
func (c *Comparison) WriteText(w io.Writer) error {
	var b strings.Builder
	labels, what := c.labels()
	for i, rep := range c.Reports {
		fmt.Fprintf(&b, "==== %s %s ====\n", what, labels[i])
		if err := rep.WriteText(&b); err != nil {
			return err
		}
		b.WriteString("\n")
	}
	b.WriteString(c.DiffText())
	_, err := io.WriteString(w, b.String())
	return err
}

// DiffText is the part of the text output that says where the modes (or versions) differ.
func (c *Comparison) DiffText() string {
	var b strings.Builder
	labels, what := c.labels()
	fmt.Fprintf(&b, "==== where the %ss differ (%s) ====\n", what, strings.Join(labels, ", "))
	if len(c.Differences) == 0 {
		fmt.Fprintf(&b, "nowhere: every step has the same outcome under every %s\n", what)
	}
	for _, d := range c.Differences {
		fmt.Fprintf(&b, "[%d] %s\n", d.Index, d.Title)
		for _, f := range d.Facts {
			var parts []string
			for _, m := range labels {
				v, ok := f.values()[m]
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
		if d.ByDesign != "" {
			fmt.Fprintf(&b, "      by design: %s\n", d.ByDesign)
		}
		for _, ns := range d.DatapathState {
			fmt.Fprintf(&b, "      %s state of %s kept (-o json: differences[].datapath_state; --keep DIR)\n", c.Reports[len(c.Reports)-1].Backend, ns.Node)
		}
	}
	var verdicts []string
	for i, rep := range c.Reports {
		v := "PASS"
		if !rep.Passed {
			v = fmt.Sprintf("FAIL (%d steps)", rep.Failed)
		}
		verdicts = append(verdicts, labels[i]+" "+v)
	}
	fmt.Fprintf(&b, "\n%s\n", strings.Join(verdicts, ", "))
	return b.String()
}
