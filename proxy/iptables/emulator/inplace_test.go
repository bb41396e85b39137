package emulator

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestRestoreKeepsNoInputAlias: the Proxier writes its next sync into the buffer it
// gave the restore before, so a ruleset must not alias the restore's input. Restores
// into tables whose long chains keep their lines read the input in place (restoreTxn);
// every version so far, its iptables-save text and the skipped lines of a lenient
// restore are unchanged when the buffer is overwritten after each restore. It fails
// if a kept string (a chain name, a comment, a rule's line) points into the input.
func TestRestoreKeepsNoInputAlias(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := New(IPv4)
		var versions []*Ruleset
		var texts []string
		buf := make([]byte, 0, 1<<16)
		for step := range rapid.IntRange(1, 6).Draw(t, "steps") {
			var in string
			if rapid.Bool().Draw(t, "kube-proxy-like") {
				in = genLongChainRestore(t)
			} else {
				in = genCowRestore(t)
			}
			lenient := rapid.Bool().Draw(t, "lenient")
			buf = append(buf[:0], in...)
			err := e.RestoreText(buf, RestoreOptions{NoFlush: true, File: "step", Lenient: lenient})
			skipped := slices.Clone(e.Skipped())
			var skippedText []string
			for _, s := range skipped {
				skippedText = append(skippedText, fmt.Sprintf("%+v", s))
			}
			errText := ""
			if err != nil {
				errText = err.Error()
			}
			versions = append(versions, e.Ruleset())
			texts = append(texts, string(e.Ruleset().Save(true)))
			// Overwrite the input as the Proxier's next sync would.
			for i := range buf {
				buf[i] = "x-\" A:"[i%6]
			}
			for i, v := range versions {
				if got := string(v.Save(true)); got != texts[i] {
					t.Fatalf("step %d: overwriting the input changed the version of step %d:\n%s\nwas:\n%s", step, i, got, texts[i])
				}
			}
			for i, s := range e.Skipped() {
				if got := fmt.Sprintf("%+v", s); got != skippedText[i] {
					t.Fatalf("step %d: overwriting the input changed skipped line %d: %s, was %s", step, i, got, skippedText[i])
				}
			}
			if err != nil && err.Error() != errText {
				t.Fatalf("step %d: overwriting the input changed the error: %q, was %q", step, err, errText)
			}
		}
	})
}

// genLongChainRestore is a kube-proxy-like restore: long chains (kept lines, reused
// on the next restore when equal) with comments, jumps and DNAT targets, some lines
// changed from one draw to the next.
func genLongChainRestore(t *rapid.T) string {
	var b strings.Builder
	n := rapid.IntRange(memoMinRules, memoMinRules+8).Draw(t, "services")
	b.WriteString("*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n")
	for i := range n {
		fmt.Fprintf(&b, ":KUBE-SVC-%d - [0:0]\n", i)
	}
	b.WriteString("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n")
	b.WriteString("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n")
	for i := range n {
		port := 80 + rapid.IntRange(0, 1).Draw(t, "port")
		fmt.Fprintf(&b, "-A KUBE-SERVICES -m comment --comment \"ns/svc-%d:http cluster IP\" -m tcp -p tcp -d 10.96.0.%d --dport %d -j KUBE-SVC-%d\n", i, i+1, port, i)
		fmt.Fprintf(&b, "-A KUBE-SVC-%d -m comment --comment ns/svc-%d:http -m statistic --mode random --probability 0.5 -j KUBE-MARK-MASQ\n", i, i)
		fmt.Fprintf(&b, "-A KUBE-SVC-%d -m tcp -p tcp -j DNAT --to-destination 10.244.0.%d:%d\n", i, i+1, 8080+i)
	}
	if rapid.IntRange(0, 4).Draw(t, "bad line") == 0 {
		b.WriteString("-A KUBE-SERVICES -m bogus-module --x \"y z\" -j ACCEPT\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}
