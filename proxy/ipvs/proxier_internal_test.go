package ipvs

// Tests of the proxier's unexported helpers: set entries, the saved-state readers,
// kernel versions. The tests that run the proxier against the IPVS emulator are in the
// external test package (proxier_*_test.go).

import (
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy/iptables"
)

func TestCanonicalEntry(t *testing.T) {
	for in, want := range map[string]string{
		"10.96.0.1,TCP:443":              "10.96.0.1,tcp:443",
		"10.96.0.1,443":                  "10.96.0.1,tcp:443",
		"1.2.3.4,tcp:80,10.0.0.0/8":      "1.2.3.4,tcp:80,10.0.0.0/8",
		"1.2.3.4,tcp:80,10.1.2.3/32":     "1.2.3.4,tcp:80,10.1.2.3",
		"2001:db8::0:1,udp:53,fd00::/64": "2001:db8::1,udp:53,fd00::/64",
		"30080":                          "30080",
	} {
		typ := setTypeHashIPPort
		if in == "30080" {
			typ = setTypeBitmapPort
		}
		if got := canonicalEntry(typ, in); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

func FuzzCanonicalEntry(f *testing.F) {
	for _, s := range []string{"10.96.0.1,tcp:443", "10.96.0.1,TCP:443", "1.2.3.4,tcp:80,10.0.0.0/8", "2001:db8::1,udp:53,fd00::/64", "30080", "10.0.0.1", "a,b:c,d"} {
		f.Add(setTypeHashIPPortNet, s)
	}
	f.Fuzz(func(t *testing.T, typ, e string) {
		c := canonicalEntry(typ, e)
		if again := canonicalEntry(typ, c); again != c {
			t.Errorf("not idempotent: %q -> %q -> %q", e, c, again)
		}
	})
}

func FuzzParseSaved(f *testing.F) {
	f.Add([]byte("create A hash:ip,port family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1\nadd A 10.0.0.1,tcp:80\n"),
		[]byte("*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\nCOMMIT\n"))
	f.Fuzz(func(t *testing.T, sets, rules []byte) {
		saved := parseSavedSets(sets)
		for name, s := range saved {
			if s == nil || s.entries == nil {
				t.Fatalf("set %q parsed as nil", name)
			}
		}
		sr := iptables.ParseSave(rules)
		jd := jumpRestore(sr)
		// What jumpRestore asks for is missing from the saved rules, and nothing else.
		for _, j := range jumpRules {
			missing := !sr.HasRule(j.Table, j.Chain, j.Spec())
			if got := strings.Contains(string(jd), "-I "+j.Chain+" "+j.Spec()); got != missing {
				t.Fatalf("jump %s %s: in restore %v, missing %v", j.Table, j.Chain, got, missing)
			}
		}
	})
}

func FuzzKernelVersion(f *testing.F) {
	for _, s := range []string{"5.4.0-150-generic", "6.18", "4.1", "x", "5..9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseKernelVersion(s)
		if err == nil && (v[0] < 0 || v[1] < 0) {
			t.Fatalf("%q -> %v", s, v)
		}
	})
}
