package proxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Version is a kube-proxy minor release: 24 is kube-proxy 1.24. The zero Version means
// the newest release modelled (NewestVersion). Behaviour that changed between releases
// is switched by a Change (behaviour*.go) or a feature gate's default (gates.go), both read
// through NodeConfig.Has and NodeConfig.GateEnabled.
type Version int

// The releases modelled: every rule layout, cleanup and selection change of the
// reference table (docs/VERSIONS.md) between them has a switch or is marked not
// modelled there.
const (
	OldestVersion Version = 18
	NewestVersion Version = 37
)

// ParseVersion reads "1.24", "v1.24" or "1.24.3" (the patch release is ignored).
func ParseVersion(s string) (Version, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	major, rest, ok := strings.Cut(t, ".")
	if !ok || major != "1" {
		return 0, fmt.Errorf("want a version such as 1.31, got %q", s)
	}
	minorStr, patch, _ := strings.Cut(rest, ".")
	minor, err := strconv.Atoi(minorStr)
	if err != nil || minor < 0 || strconv.Itoa(minor) != minorStr {
		return 0, fmt.Errorf("want a version such as 1.31, got %q", s)
	}
	if patch != "" {
		if _, err := strconv.Atoi(patch); err != nil {
			return 0, fmt.Errorf("want a version such as 1.31, got %q", s)
		}
	}
	return Version(minor), nil
}

// String prints "1.24" ("current" for the zero Version).
func (v Version) String() string {
	if v == 0 {
		return "current"
	}
	return fmt.Sprintf("1.%d", int(v))
}

// Resolved is the release v stands for: NewestVersion for the zero Version.
func (v Version) Resolved() Version {
	if v == 0 {
		return NewestVersion
	}
	return v
}

// AtLeast reports whether v (resolved) is release 1.minor or later.
func (v Version) AtLeast(minor int) bool { return int(v.Resolved()) >= minor }

// CheckModelled returns an error naming the nearest modelled releases when v is outside
// OldestVersion..NewestVersion.
func (v Version) CheckModelled() error {
	r := v.Resolved()
	switch {
	case r < OldestVersion:
		return fmt.Errorf("kube-proxy %s is older than the model: the oldest release modelled is %s (the model covers %s-%s)", r, OldestVersion, OldestVersion, NewestVersion)
	case r > NewestVersion:
		return fmt.Errorf("kube-proxy %s is newer than the model: the newest release modelled is %s (the model covers %s-%s)", r, NewestVersion, OldestVersion, NewestVersion)
	}
	return nil
}

// Modelled says how far the model follows a behaviour change.
type Modelled string

// How far a change is modelled.
const (
	ModelledYes    Modelled = "yes"
	ModelledPartly Modelled = "partly"
	ModelledNo     Modelled = "no"
)

// Change is one behaviour change of kube-proxy (or of the kernel under it) between
// releases: a row of the reference table, a switch in the code and a line of
// docs/VERSIONS.md. Code asks NodeConfig.Has(name) instead of comparing versions, so
// that every version comparison is named, documented and tested.
type Change struct {
	// Name is the switch's name ("masquerade-clears-mark").
	Name string
	// Row is the row of the team's reference table (kube-proxy-versions.md), 0 if none.
	Row int
	// Area groups changes in docs/VERSIONS.md ("iptables layout", "conntrack cleanup").
	Area string
	// Modes are the proxy modes the change concerns; empty: every mode.
	Modes []string
	// Version is the first kube-proxy release with the new behaviour; 0 when Gate alone
	// decides.
	Version Version
	// Gate is the feature gate that turns the new behaviour on, if one does: Has then
	// also needs the gate enabled (its default for the release, or the override).
	Gate string
	// Kernel is, for a change of the kernel's behaviour, the first Linux release with
	// it ("5.9"); Has does not decide such changes (the node's kernel version does).
	Kernel string
	// Ref names the PR or KEP ("kubernetes#92035", "KEP-3178").
	Ref string
	// Doc says what changed, before and after.
	Doc string
	// Modelled says whether the simulation follows it; Note says what is left out of a
	// partly modelled change.
	Modelled Modelled
	Note     string
	// Test names the test that shows a flow whose outcome differs before and after.
	Test string
}

var changes []Change

// registerChanges adds changes to the table; a second change of the same name is a
// programming error.
func registerChanges(cs ...Change) {
	for _, c := range cs {
		if c.Name == "" || c.Doc == "" || c.Modelled == "" {
			panic(fmt.Sprintf("proxy: change %q needs a name, a doc and how far it is modelled", c.Name))
		}
		if _, ok := LookupChange(c.Name); ok {
			panic(fmt.Sprintf("proxy: change %q registered twice", c.Name))
		}
		if c.Gate != "" {
			if _, ok := gates[c.Gate]; !ok {
				panic(fmt.Sprintf("proxy: change %q names unknown feature gate %q", c.Name, c.Gate))
			}
		}
		changes = append(changes, c)
	}
}

// Changes returns the behaviour changes modelled or listed, ordered by reference row
// then name.
func Changes() []Change {
	out := slices.Clone(changes)
	slices.SortStableFunc(out, func(a, b Change) int {
		if a.Row != b.Row {
			return a.Row - b.Row
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// LookupChange returns the change of that name.
func LookupChange(name string) (Change, bool) {
	for i := range changes { // by index: a Change is too large to copy per step
		if changes[i].Name == name {
			return changes[i], true
		}
	}
	return Change{}, false
}

// Has reports whether the node's kube-proxy has the new behaviour of the named change:
// its release is the change's or later and, for a gated change, the gate is enabled. It
// panics on a name no change has (a programming error).
func (c *NodeConfig) Has(name string) bool {
	ch, ok := LookupChange(name)
	if !ok {
		panic(fmt.Sprintf("proxy: no behaviour change named %q", name))
	}
	if ch.Version != 0 && !c.Version.AtLeast(int(ch.Version)) {
		return false
	}
	if ch.Gate != "" && !c.GateEnabled(ch.Gate) {
		return false
	}
	return true
}

// PartlyModelled lists, for a scenario's warnings, the kube-proxy changes that came
// after release v (so v has the behaviour from before them) and that the model follows
// only partly or not at all: the model knows the later behaviour best, so a replay of
// v may show it where v did otherwise.
func PartlyModelled(v Version, mode string) []Change {
	var out []Change
	for _, ch := range Changes() {
		if ch.Modelled == ModelledYes || ch.Kernel != "" || ch.Version == 0 || v.AtLeast(int(ch.Version)) {
			continue
		}
		if len(ch.Modes) > 0 && !slices.Contains(ch.Modes, mode) {
			continue
		}
		out = append(out, ch)
	}
	return out
}
