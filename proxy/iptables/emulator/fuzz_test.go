package emulator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: any input either fails with a *ParseError or loads into a ruleset whose
// save loads back and saves identically; nothing panics.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"../../../testdata/iptables/normalise/*", "../../../testdata/iptables/dumps/*"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b, false)
			}
		}
	}
	f.Add([]byte("*nat\n:X - [0:0]\n-A PREROUTING -p tcp -m comment --comment \"a\\\"b\" -j X\n-A X -m statistic --mode random --probability 0.5 -j DNAT --to-destination 1.2.3.4:80\nCOMMIT\n"), false)
	f.Add([]byte("*filter\n-A INPUT -s fd00::/8 -p ipv6-icmp -m icmp6 --icmpv6-type 128 -j ACCEPT\nCOMMIT\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, v6 bool) {
		fam := IPv4
		if v6 {
			fam = IPv6
		}
		rs, err := ParseDump(data, fam, "fuzz")
		if err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("error %v (%T) is not a *ParseError", err, err)
			}
			return
		}
		saved := rs.Save(true)
		back, err := ParseDump(saved, fam, "saved")
		if err != nil {
			t.Fatalf("saved text does not load: %v\n%s", err, saved)
		}
		if again := back.Save(true); string(again) != string(saved) {
			t.Fatalf("save not stable:\n%s", lineDiff(string(saved), string(again)))
		}
		// Evaluating any loaded ruleset does not panic.
		e, _ := Load(saved, fam, "saved")
		src, dst := "10.0.0.1:5", "10.0.0.2:80"
		if v6 {
			src, dst = "[fd00::1]:5", "[fd00::2]:80"
		}
		e.Walk(WalkInput{Packet: *pkt("tcp " + src + " " + dst), AllBranches: true, MaxPaths: 64})
	})
}

// FuzzLenientLoad: a lenient load never fails on a line's content and never panics;
// on input a strict load takes it skips nothing and loads the same ruleset; what it
// loads saves to a dump a strict load takes.
func FuzzLenientLoad(f *testing.F) {
	files, _ := filepath.Glob("../../../testdata/iptables/dumps/*")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(garbledDump))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Load(data, IPv4, "fuzz", Lenient())
		if err != nil {
			return // a loop that dropping rules cannot break, say: reported, not a panic
		}
		saved := e.Ruleset().Save(true)
		if _, err := ParseDump(saved, IPv4, "saved"); err != nil {
			t.Fatalf("the lenient load saves a dump a strict load refuses: %v\n%s", err, saved)
		}
		if strict, err := ParseDump(data, IPv4, "fuzz"); err == nil {
			if len(e.Skipped()) != 0 {
				t.Fatalf("strict load takes it, lenient skipped %v", e.Skipped())
			}
			if string(strict.Save(true)) != string(saved) {
				t.Fatal("strict and lenient loads differ")
			}
		}
	})
}

// FuzzParseIPSetList: the ipset list parser never panics, its errors are ParseErrors,
// and what it parses saves to `ipset save` output that parses to the same sets.
func FuzzParseIPSetList(f *testing.F) {
	f.Add([]byte(ipsetList))
	f.Add([]byte("Name: A\nType: hash:net\nHeader: family inet6 hashsize 64\nMembers:\nfd00::/64 nomatch\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseIPSetList(data, "fuzz")
		if err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("error %v (%T) is not a *ParseError", err, err)
			}
			return
		}
		back, err := ParseIPSetSave(s.Save(), "saved")
		if err != nil {
			t.Fatalf("saved sets do not parse: %v\n%s", err, s.Save())
		}
		if string(back.Save()) != string(s.Save()) {
			t.Fatalf("save round trip differs")
		}
	})
}

// FuzzIncrementalRestore: --noflush restores applied in turn to an emulator (table
// versions sharing unchanged chains, incremental validation, reused rule lines) accept
// and refuse what the same restores validated whole do, with the same error and the
// same resulting iptables-save; nothing panics.
func FuzzIncrementalRestore(f *testing.F) {
	long := "*filter\n:L - [0:0]\n:A - [0:0]\n-A INPUT -j L\n"
	for i := range 20 {
		long += fmt.Sprintf("-A L -p tcp --dport %d -j A\n", i+1)
	}
	long += "COMMIT\n"
	f.Add([]byte(long), []byte(strings.Replace(long, "--dport 7 ", "--dport 70 ", 1)), []byte("*filter\n:A - [0:0]\n-A A -j L\nCOMMIT\n"))
	f.Add([]byte("*nat\n:X - [0:0]\n-A PREROUTING -j X\n-A X -p tcp -j DNAT --to-destination 1.2.3.4:80\nCOMMIT\n"),
		[]byte("*nat\n-A POSTROUTING -j X\nCOMMIT\n"), []byte("*nat\n-D PREROUTING 1\n:X - [0:0]\n-A X -j MASQUERADE\n-A POSTROUTING -j X\nCOMMIT\n"))
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		e := New(IPv4)
		whole := NewRuleset(IPv4)
		for i, in := range [][]byte{a, b, c} {
			err := e.RestoreText(in, RestoreOptions{NoFlush: true, File: "in"})
			w, werr := Restore(whole, in, RestoreOptions{NoFlush: true, File: "in", wholeTables: true})
			if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
				t.Fatalf("input %d: incremental error %v, whole-table error %v", i+1, err, werr)
			}
			if err == nil {
				whole = w
			}
			if got, want := string(e.SaveCounters()), string(whole.Save(true)); got != want {
				t.Fatalf("input %d: incremental result differs:\n%s", i+1, lineDiff(want, got))
			}
		}
	})
}
