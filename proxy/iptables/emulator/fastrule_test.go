package emulator

import (
	"reflect"
	"strings"
	"testing"
)

// generalRule parses an -A line the general way (tokenize, parse), as preParseLine
// does: its chain and rule, or an error.
func generalRule(line string, f Family) (string, *Rule, error) {
	toks, err := tokenize(line, nil)
	if err != nil {
		return "", nil, err
	}
	sp := &specParser{family: f}
	spec, err := sp.parse(toks[2:])
	if err != nil {
		return "", nil, err
	}
	return toks[1].val, spec.rule, nil
}

// checkFastRule fails when fastRule takes line for family f and the general parse
// refuses it or gives another chain or rule; it returns whether fastRule took it.
func checkFastRule(t *testing.T, line string, f Family) bool {
	t.Helper()
	sp := &specParser{family: f}
	chain, spec, ok := sp.fastRule(line)
	if !ok {
		return false
	}
	gchain, grule, err := generalRule(line, f)
	if err != nil {
		t.Fatalf("%s %q: fastRule took a line the general parse refuses: %v", f, line, err)
	}
	if spec.srcs != nil || spec.dsts != nil || spec.counters != nil || spec.skip {
		t.Fatalf("%s %q: fastRule's spec has lists, counters or a skip: %+v", f, line, spec)
	}
	if chain != gchain || !reflect.DeepEqual(spec.rule, grule) {
		t.Fatalf("%s %q:\nfastRule: %s %+v %s\ngeneral:  %s %+v %s", f, line, chain, spec.rule.Spec, spec.rule, gchain, grule.Spec, grule)
	}
	return true
}

// TestFastRuleMatchesParse: the lines of kube-proxy's per-service rule shapes are
// taken by fastRule and built as the general parse builds them; lines that differ from
// those shapes in any way the general parse cares about go the general way.
func TestFastRuleMatchesParse(t *testing.T) {
	fast := []struct {
		line string
		f    Family
	}{
		// KUBE-SEP, small and large cluster.
		{`-A KUBE-SEP-DWSGLITWOGN55UUU -m comment --comment ns0/svc0:http -s 10.0.0.1 -j KUBE-MARK-MASQ`, IPv4},
		{`-A KUBE-SEP-DWSGLITWOGN55UUU -s 10.0.0.1 -j KUBE-MARK-MASQ`, IPv4},
		{`-A KUBE-SEP-DWSGLITWOGN55UUU -s fd00::1 -j KUBE-MARK-MASQ`, IPv6},
		{`-A KUBE-SEP-DWSGLITWOGN55UUU -m comment --comment ns0/svc0:http -m tcp -p tcp -j DNAT --to-destination 10.0.0.1:8080`, IPv4},
		{`-A KUBE-SEP-DWSGLITWOGN55UUU -m udp -p udp -j DNAT --to-destination 10.0.0.1:53`, IPv4},
		{`-A KUBE-SEP-DWSGLITWOGN55UUU -m tcp -p tcp -j DNAT --to-destination [fd00::1]:8080`, IPv6},
		{`-A KUBE-SEP-DWSGLITWOGN55UUU -m tcp -p tcp -j DNAT --to-destination 10.0.0.1`, IPv4},
		{`-A KUBE-SEP-DWSGLITWOGN55UUU -m tcp -p tcp -j DNAT --to-destination 10.0.0.1-10.0.0.9:80-90`, IPv4},
		// KUBE-SVC's probability ladder.
		{`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -m comment --comment "ns0/svc0:http -> 10.0.0.0:8080" -m statistic --mode random --probability 0.1000000000 -j KUBE-SEP-DWSGLITWOGN55UUU`, IPv4},
		{`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-DWSGLITWOGN55UUU`, IPv4},
		{`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -m statistic --mode random --probability 1 -j KUBE-SEP-DWSGLITWOGN55UUU`, IPv6},
		{`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -m comment --comment "ns0/svc0:http -> 10.0.0.9:8080" -j KUBE-SEP-5NYFFN2NLCK5DT2L`, IPv4},
		{`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -j KUBE-SEP-5NYFFN2NLCK5DT2L`, IPv4},
		{`-A KUBE-FORWARD -j ACCEPT`, IPv4},
		{`-A X -m comment --comment "" -j DROP`, IPv4},
		{`-A X -m comment --comment "it's" -j RETURN`, IPv4},
		// KUBE-SERVICES and the cluster IP masquerade.
		{`-A KUBE-SERVICES -m comment --comment "ns0/svc0:http cluster IP" -m tcp -p tcp -d 172.16.0.0 --dport 80 -j KUBE-SVC-K7ZVFMM3TUXRXRZR`, IPv4},
		{`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -m comment --comment "ns0/svc0:http cluster IP" -m tcp -p tcp -d 172.16.0.0 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ`, IPv4},
		{`-A KUBE-SERVICES -m comment --comment "ns/dns:dns cluster IP" -m udp -p udp -d fd00::a --dport 53 -j KUBE-SVC-K7ZVFMM3TUXRXRZR`, IPv6},
		{`-A KUBE-SERVICES -m udp -p udp -d 10.96.0.10/32 --dport 53:54 ! -s 0.0.0.0/0 -j KUBE-SVC-X`, IPv4},
		{`-A KUBE-SERVICES -m tcp -p tcp -d 10.96.0.10 --dport 80 -j ACCEPT`, IPv4},
		{`-A KUBE-SERVICES -m tcp -p tcp -d 0.0.0.0/0 --dport 1:65535 -j X`, IPv4},
		// iptables-save's order (a dump of a node).
		{`-A KUBE-SEP-DWSGLITWOGN55UUU -s 10.244.1.5/32 -m comment --comment "default/nginx:http" -j KUBE-MARK-MASQ`, IPv4},
		{`-A KUBE-SEP-DWSGLITWOGN55UUU -p tcp -m comment --comment "default/nginx:http" -m tcp -j DNAT --to-destination 10.244.1.5:80`, IPv4},
		{`-A KUBE-SVC-NPX46M4PTMTKRN6Y ! -s 10.244.0.0/16 -d 10.96.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-MARK-MASQ`, IPv4},
		{`-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment "kube-system/kube-dns:dns cluster IP" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU`, IPv4},
		{`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -m comment --comment "default/nginx:http -> 10.244.1.5:80" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-DWSGLITWOGN55UUU`, IPv4},
		{`-A KUBE-SERVICES -d fd00:10:96::a/128 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-X`, IPv6},
		{`-A X -p tcp -m tcp -d 10.0.0.1 --dport 80 -j Y`, IPv4},
		{`-A X -p tcp -m statistic --mode random --probability 0.5 -j Y`, IPv4},
		{`-A X -d 10.0.0.1 -j DNAT --to-destination 10.0.0.2`, IPv4},
		{`-A X -m tcp -p tcp -d 10.0.0.1 --dport 80 -s 10.0.0.0/8 -j Y`, IPv4},
	}
	for _, c := range fast {
		if !checkFastRule(t, c.line, c.f) {
			t.Errorf("%s %q: not taken by fastRule", c.f, c.line)
		}
	}
	general := []struct {
		line string
		f    Family
	}{
		{`-I KUBE-SVC-X -j KUBE-SEP-Y`, IPv4},                                      // not -A
		{`-A KUBE-SVC-X  -j KUBE-SEP-Y`, IPv4},                                     // two spaces
		{"-A KUBE-SVC-X\t-j KUBE-SEP-Y", IPv4},                                     // a tab
		{`-A "KUBE-SVC-X" -j KUBE-SEP-Y`, IPv4},                                    // a quoted chain
		{`-A -t -j KUBE-SEP-Y`, IPv4},                                              // a table option
		{`-A X -m comment --comment -t -j Y`, IPv4},                                // ditto
		{`-A X -m comment --comment --table -j Y`, IPv4},                           // ditto
		{`-A X -m comment --comment "a\"b" -j Y`, IPv4},                            // an escape
		{`-A X -m comment --comment "ab"c -j Y`, IPv4},                             // a word after the quote
		{`-A X -m comment --comment "ab -j Y`, IPv4},                               // unterminated
		{`-A X -m comment --comment ` + strings.Repeat("c", 256) + ` -j Y`, IPv4},  // too long
		{`-A X -s 10.0.0.1,10.0.0.2 -j Y`, IPv4},                                   // a list
		{`-A X -s 10.0.0.1 -j Y`, IPv6},                                            // the other family
		{`-A X -s 10.0.0.1 -j MASQUERADE`, IPv4},                                   // a target with a module
		{`-A X -s 10.0.0.1 -j CT`, IPv4},                                           // an extension target
		{`-A X -s 10.0.0.1 -j KUBE-MARK-MASQ --foo`, IPv4},                         // something after the target
		{`-A X -s 10.0.0.1`, IPv4},                                                 // no target
		{`-A X -m sctp -p sctp -j DNAT --to-destination 10.0.0.1:80`, IPv4},        // sctp
		{`-A X -m tcp -p udp -j DNAT --to-destination 10.0.0.1:80`, IPv4},          // mismatched
		{`-A X -m tcp -p tcp -j DNAT --to-destination 10.0.0.1:0`, IPv4},           // port 0
		{`-A X -m tcp -p tcp -j DNAT --to-destination fd00::1`, IPv4},              // family
		{`-A X -m tcp -p tcp -j DNAT --to-destination 10.0.0.1:80 --random`, IPv4}, // more options
		{`-A X -m statistic --mode random --probability 1.5 -j Y`, IPv4},           // out of range
		{`-A X -m statistic --mode random --probability nan -j Y`, IPv4},           // not a number
		{`-A X -m statistic --mode nth --every 2 --packet 0 -j Y`, IPv4},           // nth mode
		{`-A X -m tcp -p tcp -d 10.0.0.1 --dport 0-65536 -j Y`, IPv4},              // bad port
		{`-A X -m tcp -p tcp -d 10.0.0.1 --dport 80 ! -s 10.0.0.0/8 -j -Y`, IPv4},  // bad chain
		{`-A X -m tcp -p tcp -d 10.0.0.1 --sport 80 -j Y`, IPv4},                   // --sport
		{`-A X -j ` + strings.Repeat("Y", 29), IPv4},                               // too long a chain
		{`-A X -m comment --comment a -m comment --comment b -j Y`, IPv4},          // two comments
		{`-A X -p tcp --dport 80 -j Y`, IPv4},                                      // an implicit -m tcp
		{`-A X -p tcp --dport 80 -m tcp -j Y`, IPv4},                               // ditto
		{`-A X -m tcp -p tcp --dport 80 --dport 81 -j Y`, IPv4},                    // twice
		{`-A X -m tcp -m tcp -p tcp -j Y`, IPv4},                                   // ditto
		{`-A X -s 10.0.0.1 -s 10.0.0.2 -j Y`, IPv4},                                // ditto
		{`-A X -s 10.0.0.1 ! -s 10.0.0.2 -j Y`, IPv4},                              // ditto
		{`-A X -p tcp -p tcp -j Y`, IPv4},                                          // ditto
		{`-A X -d 10.0.0.1 -d 10.0.0.1 -j Y`, IPv4},                                // ditto
		{`-A X -m tcp -j Y`, IPv4},                                                 // no -p
		{`-A X -m udp -p tcp -j Y`, IPv4},                                          // another -p
		{`-A X -j DNAT --to-destination 10.0.0.2:80`, IPv4},                        // a port without -p
		{`-A X -p tcp -j DNAT`, IPv4},                                              // no --to-destination
		{`-A X -p tcp -j Y --to-destination 10.0.0.2`, IPv4},                       // not DNAT
		{`-A X -p tcpx -j Y`, IPv4},                                                // no such protocol
		{`-A X -p TCP -j Y`, IPv4},                                                 // another spelling
		{`-A X -m tcpmss -p tcp -j Y`, IPv4},                                       // another module
		{`-A X ! -d 10.0.0.1 -j Y`, IPv4},                                          // ! -d
	}
	for _, c := range general {
		if checkFastRule(t, c.line, c.f) {
			t.Errorf("%s %q: taken by fastRule", c.f, c.line)
		}
	}
}

// FuzzFastRule: whatever line fastRule takes, the general parse takes too, giving the
// same chain and rule.
func FuzzFastRule(f *testing.F) {
	for _, s := range []string{
		`-A KUBE-SEP-DWSGLITWOGN55UUU -m comment --comment ns0/svc0:http -s 10.0.0.1 -j KUBE-MARK-MASQ`,
		`-A KUBE-SEP-DWSGLITWOGN55UUU -m tcp -p tcp -j DNAT --to-destination 10.0.0.1:8080`,
		`-A KUBE-SEP-DWSGLITWOGN55UUU -m udp -p udp -j DNAT --to-destination [fd00::1]:53`,
		`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -m comment --comment "ns0/svc0:http -> 10.0.0.0:8080" -m statistic --mode random --probability 0.1000000000 -j KUBE-SEP-DWSGLITWOGN55UUU`,
		`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -j KUBE-SEP-5NYFFN2NLCK5DT2L`,
		`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -m comment --comment "ns0/svc0:http cluster IP" -m tcp -p tcp -d 172.16.0.0 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ`,
		`-A KUBE-SERVICES -m udp -p udp -d fd00::a --dport 53 -j ACCEPT`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, line string, v6 bool) {
		fam := IPv4
		if v6 {
			fam = IPv6
		}
		checkFastRule(t, trimLine(line), fam)
	})
}

// BenchmarkFastRule parses the five lines of a kube-proxy service (cluster IP, the
// masquerade, a probability, the last jump, an endpoint's two) with fastRule, and with
// the general parse (general).
func BenchmarkFastRule(b *testing.B) {
	lines := []string{
		`-A KUBE-SERVICES -m comment --comment "ns0/svc0:http cluster IP" -m tcp -p tcp -d 172.16.0.0 --dport 80 -j KUBE-SVC-K7ZVFMM3TUXRXRZR`,
		`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -m comment --comment "ns0/svc0:http cluster IP" -m tcp -p tcp -d 172.16.0.0 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ`,
		`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -m statistic --mode random --probability 0.1000000000 -j KUBE-SEP-DWSGLITWOGN55UUU`,
		`-A KUBE-SVC-K7ZVFMM3TUXRXRZR -j KUBE-SEP-5NYFFN2NLCK5DT2L`,
		`-A KUBE-SEP-DWSGLITWOGN55UUU -s 10.0.0.1 -j KUBE-MARK-MASQ`,
		`-A KUBE-SEP-DWSGLITWOGN55UUU -m tcp -p tcp -j DNAT --to-destination 10.0.0.1:8080`,
	}
	b.Run("fast", func(b *testing.B) {
		sp := &specParser{family: IPv4}
		for i := 0; i < b.N; i++ {
			if _, _, ok := sp.fastRule(lines[i%len(lines)]); !ok {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("general", func(b *testing.B) {
		sp := &specParser{family: IPv4}
		var toks []token
		for i := 0; i < b.N; i++ {
			var err error
			if toks, err = tokenize(lines[i%len(lines)], toks); err != nil {
				b.Fatal(err)
			}
			if _, err := sp.parse(toks[2:]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
