package emulator

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// genMemoChain draws the -A lines of a long chain (memoMinRules or more), which a
// restore keeps the lines of.
func genMemoChain(t *rapid.T) []string {
	n := rapid.IntRange(memoMinRules, 40).Draw(t, "rules")
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf("-A LONG -p tcp --dport %d -j %s", rapid.IntRange(1, 60).Draw(t, "port"),
			rapid.SampledFrom([]string{"ACCEPT", "DROP", "U1", "U2"}).Draw(t, "target"))
	}
	return lines
}

// editMemoChain draws the next version of a chain's lines: mostly the same, with
// lines changed, inserted or deleted, written with odd line ends, blanks and comments
// between them, or after deleting a chain some of them jump to.
func editMemoChain(t *rapid.T, lines []string) string {
	out := append([]string(nil), lines...)
	for n := rapid.IntRange(0, 3).Draw(t, "edits"); n > 0 && len(out) > 0; n-- {
		i := rapid.IntRange(0, len(out)-1).Draw(t, "at")
		switch rapid.IntRange(0, 2).Draw(t, "edit") {
		case 0:
			out[i] = fmt.Sprintf("-A LONG -p udp --dport %d -j ACCEPT", rapid.IntRange(1, 9).Draw(t, "port"))
		case 1:
			out = append(out[:i], append([]string{"-A LONG -j U1"}, out[i:]...)...)
		case 2:
			out = append(out[:i], out[i+1:]...)
		}
	}
	var b strings.Builder
	b.WriteString("*filter\n:LONG - [0:0]\n")
	if rapid.IntRange(0, 5).Draw(t, "delete U2") == 0 {
		b.WriteString("-X U2\n") // LONG was flushed: U2 has no caller left
	}
	for i, l := range out {
		b.WriteString(l)
		switch rapid.IntRange(0, 12).Draw(t, fmt.Sprintf("end %d", i)) {
		case 0:
			b.WriteString("\r\n")
		case 1:
			b.WriteString(" \n")
		case 2:
			b.WriteString("\n\n")
		case 3:
			b.WriteString("\n# a comment\n")
		default:
			b.WriteString("\n")
		}
	}
	b.WriteString("COMMIT")
	if rapid.Bool().Draw(t, "final newline") {
		b.WriteString("\n")
	}
	return b.String()
}

// Reusing the rules of a chain's version before (memoLine, and memoRun for the lines
// that follow in the same order) gives what parsing every line gives: the same
// rules, counters, origins (file and line) and errors, over several versions.
func TestMemoRunAsParsing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lines := genMemoChain(t)
		first := "*filter\n:LONG - [0:0]\n:U1 - [0:0]\n:U2 - [0:0]\n-A INPUT -j LONG\n" + strings.Join(lines, "\n") + "\nCOMMIT\n"
		var texts []string
		if rapid.Bool().Draw(t, "chains made empty first") {
			// As kube-proxy's setup does before its first sync (flush of an empty
			// chain, then -A lines: clean).
			texts = append(texts, "*filter\n:LONG - [0:0]\n:U1 - [0:0]\n:U2 - [0:0]\nCOMMIT\n")
		}
		texts = append(texts, first)
		for n := rapid.IntRange(1, 3).Draw(t, "versions"); n > 0; n-- {
			texts = append(texts, editMemoChain(t, lines))
		}
		memo, parsed := New(IPv4), New(IPv4)
		for v, text := range texts {
			file := fmt.Sprintf("v%d", v)
			errM := memo.RestoreText([]byte(text), RestoreOptions{NoFlush: true, File: file})
			errP := parsed.RestoreText([]byte(text), RestoreOptions{NoFlush: true, File: file, noMemo: true})
			if fmt.Sprint(errM) != fmt.Sprint(errP) {
				t.Fatalf("version %d: error %v with reuse, %v parsing:\n%s", v, errM, errP, text)
			}
			if a, b := memo.Ruleset(), parsed.Ruleset(); string(a.Save(true)) != string(b.Save(true)) {
				t.Fatalf("version %d: with reuse\n%s\nparsing\n%s", v, a.Save(true), b.Save(true))
			}
			ca, cb := memo.Ruleset().Chain(TableFilter, "LONG"), parsed.Ruleset().Chain(TableFilter, "LONG")
			for i, r := range ca.Rules {
				if q := cb.Rules[i]; r.File != q.File || r.Line != q.Line {
					t.Fatalf("version %d: rule %d from %s:%d with reuse, %s:%d parsing:\n%s", v, i+1, r.File, r.Line, q.File, q.Line, text)
				}
			}
		}
	})
}
