package emulator

import (
	"slices"
	"strings"
	"testing"
)

// cutFields splits s with cutSpace, as chainLine does.
func cutFields(s string) []string {
	var fields []string
	for {
		var f string
		if f, s = cutSpace(s); f == "" {
			return fields
		}
		fields = append(fields, f)
	}
}

// cutSpace splits as strings.Fields does: the chain-line parser relies on it.
func TestCutSpaceAsFields(t *testing.T) {
	for _, s := range []string{"", " ", "a", " a", "a ", "KUBE-SVC-X - [0:0]", "a\tb\u00a0c  d\u2003", "\u00a0\u00a0x", "é b", "\xff \xfe"} {
		if got, want := cutFields(s), strings.Fields(s); !slices.Equal(got, want) {
			t.Errorf("cutSpace fields of %q = %q, strings.Fields %q", s, got, want)
		}
	}
}

func FuzzCutSpace(f *testing.F) {
	f.Add("KUBE-SVC-X - [0:0]")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := cutFields(s), strings.Fields(s); !slices.Equal(got, want) {
			t.Fatalf("cutSpace fields of %q = %q, strings.Fields %q", s, got, want)
		}
	})
}

// trimLine trims as strings.TrimRight(" \t\r\n") then strings.TrimLeft(" \t") do.
func TestTrimLineAsTrim(t *testing.T) {
	for _, s := range []string{"", " ", "\t\r\n", "a", " -A X \r\n", "\t:KUBE-SVC-X - [0:0]\n", "x\n\r \t", "\n x", " \u00a0a\u00a0 "} {
		if got, want := trimLine(s), strings.TrimLeft(strings.TrimRight(s, " \t\r\n"), " \t"); got != want {
			t.Errorf("trimLine(%q) = %q, want %q", s, got, want)
		}
	}
}

func FuzzTrimLine(f *testing.F) {
	f.Add(" -A X -j ACCEPT \r\n")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := trimLine(s), strings.TrimLeft(strings.TrimRight(s, " \t\r\n"), " \t"); got != want {
			t.Fatalf("trimLine(%q) = %q, want %q", s, got, want)
		}
	})
}

// isTargetName's length filter passes every target name and changes no answer.
func TestIsTargetNameFilter(t *testing.T) {
	slow := func(s string) bool {
		switch s {
		case "ACCEPT", "DROP", "RETURN", "QUEUE":
			return true
		}
		return targets[s] != nil || passTargets[s] || stopTargets[s]
	}
	names := []string{"ACCEPT", "DROP", "RETURN", "QUEUE", "", "KUBE-SEP-ABCDEFGHIJKLMNOP", "KUBE-MARK-MASQ", "DNAT2", "dnat"}
	for n := range targets {
		names = append(names, n, n+"X", n[1:])
	}
	for _, m := range []map[string]bool{passTargets, stopTargets} {
		for n := range m {
			names = append(names, n, n+"X", n[1:])
		}
	}
	for _, s := range names {
		if got, want := isTargetName(s), slow(s); got != want {
			t.Errorf("isTargetName(%q) = %v, want %v", s, got, want)
		}
	}
}

// containsChainNameBreak is strings.ContainsAny(s, " \t\"'").
func TestContainsChainNameBreak(t *testing.T) {
	for _, s := range []string{"", "KUBE-X", "a b", "a\tb", `a"b`, "a'b", "é", "a\nb"} {
		if got, want := containsChainNameBreak(s), strings.ContainsAny(s, " \t\"'"); got != want {
			t.Errorf("containsChainNameBreak(%q) = %v, want %v", s, got, want)
		}
	}
}

// lookupModule answers as the modules map does, for the names it switches on too.
func TestLookupModule(t *testing.T) {
	names := []string{"", "nosuch", "comment", "tcp", "udp", "statistic", "mark", "Comment"}
	for n := range modules {
		names = append(names, n)
	}
	for _, n := range names {
		d, ok := lookupModule(n)
		want, wantOK := modules[n]
		if d != want || ok != wantOK {
			t.Errorf("lookupModule(%q) = %p, %v; modules has %p, %v", n, d, ok, want, wantOK)
		}
	}
}
