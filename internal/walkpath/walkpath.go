// Package walkpath holds what the stand-alone packet walks (`clusterlab trace`) of the
// iptables emulator, the nftables emulator and proxy/nodewalk have in common: a
// path's recorded choice points and the next path of an all-branches exploration, and
// the rendering of the outcomes as JSON, of the paths as a tree, and of the notes on
// the packet's first line.
package walkpath

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// JSON renders outcomes as an indented JSON array ([] for none), without HTML
// escaping (the `clusterlab trace -o json` format).
func JSON[T any](outcomes []*T) ([]byte, error) {
	if outcomes == nil {
		outcomes = []*T{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(outcomes); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Choice is a resolved choice point of a path: the alternative taken of N, its
// probability (1 for an assumption), the trace step it belongs to, and its label.
type Choice struct {
	Alt, N int
	P      float64
	Step   int
	Label  string
}

// Next returns the forced prefix of the next path of a depth-first exploration after
// the path that made the choices taken (the last choice with an alternative left
// moves to it), or false when every path was explored.
func Next(taken []Choice) ([]int, bool) {
	for i := len(taken) - 1; i >= 0; i-- {
		if taken[i].Alt+1 < taken[i].N {
			seq := make([]int, i+1)
			for j := range i {
				seq[j] = taken[j].Alt
			}
			seq[i] = taken[i].Alt + 1
			return seq, true
		}
	}
	return nil, false
}

// Tree is what a walk's paths give the tree writer.
type Tree[P any] struct {
	// Choices returns a path's choices.
	Choices func(p P) []Choice
	// Shared: the steps a choice's alternatives share are those before its Step +
	// Shared (the rest of the path is under the choice's branch).
	Shared int
	// Steps writes p's steps [from, to) (to < 0: to the end), each line after prefix.
	Steps func(b *strings.Builder, p P, from, to int, prefix string)
	// Leaf ends a branch with its path; only: the branch holds this one path (else
	// several paths that made the same choices end there).
	Leaf func(b *strings.Builder, p P, prefix string, only bool)
}

// ArrowLeaf is the Tree.Leaf of the emulators' walks: "=> p=P SUMMARY" for a branch
// of one path, "=> SUMMARY" for several.
func ArrowLeaf[P any](outcome func(P) (p float64, summary string)) func(*strings.Builder, P, string, bool) {
	return func(b *strings.Builder, path P, prefix string, only bool) {
		p, summary := outcome(path)
		if only {
			fmt.Fprintf(b, "%s=> p=%.6f %s\n", prefix, p, summary)
		} else {
			fmt.Fprintf(b, "%s=> %s\n", prefix, summary)
		}
	}
}

// Span is s[from:to], to < 0 meaning the end.
func Span[S any](s []S, from, to int) []S {
	if to < 0 {
		to = len(s)
	}
	return s[from:to]
}

// Write renders paths that share their first k choices (and so their steps up to
// step from) as a tree: the shared steps, then one branch per alternative of choice k,
// in order of appearance.
func (t Tree[P]) Write(b *strings.Builder, paths []P, k, from int, prefix string) {
	first := paths[0]
	if len(paths) == 1 || k >= len(t.Choices(first)) {
		t.Steps(b, first, from, -1, prefix)
		t.Leaf(b, first, prefix, len(paths) == 1)
		return
	}
	div := t.Choices(first)[k].Step + t.Shared
	t.Steps(b, first, from, div, prefix)
	var groups [][]P
	for _, p := range paths {
		if n := len(groups); n > 0 && t.Choices(groups[n-1][0])[k].Alt == t.Choices(p)[k].Alt {
			groups[n-1] = append(groups[n-1], p)
			continue
		}
		groups = append(groups, []P{p})
	}
	for gi, g := range groups {
		c := t.Choices(g[0])[k]
		branch, next := "├─", "│  "
		if gi == len(groups)-1 {
			branch, next = "└─", "   "
		}
		prob := ""
		if c.P != 1 {
			prob = fmt.Sprintf(" (p=%.6f)", c.P)
		}
		fmt.Fprintf(b, "%s%s %s%s\n", prefix, branch, c.Label, prob)
		t.Write(b, g, k+1, div, prefix+next)
	}
}

// CtNote describes the conntrack state of a walk of a packet of an existing
// connection (state, and whether the packet goes in the reply direction).
func CtNote(state netfilter.CtState, reply bool) string {
	if reply {
		return fmt.Sprintf(" (ctstate %s, reply direction)", state)
	}
	return fmt.Sprintf(" (ctstate %s)", state)
}

// ICMPNote names an ICMP message's type and code; empty for other protocols.
func ICMPNote(proto, typ, code uint8) string {
	if proto != netfilter.ProtoICMP && proto != netfilter.ProtoICMPv6 {
		return ""
	}
	return fmt.Sprintf(" (type %d code %d)", typ, code)
}
