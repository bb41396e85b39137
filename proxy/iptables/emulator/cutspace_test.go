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
