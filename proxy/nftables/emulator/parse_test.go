package emulator

import (
	"os"
	"strings"
	"testing"
)

func mustLoad(t *testing.T, text string) *Emulator {
	t.Helper()
	e, err := Load([]byte(text), "t.nft")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestBadInput: errors name the file, the line and the token or object, and nothing of
// a failed script is applied.
func TestBadInput(t *testing.T) {
	base := "table ip t {\n\tset ports {\n\t\ttype inet_service\n\t}\n\tmap m {\n\t\ttype ipv4_addr : verdict\n\t}\n\tmap dm {\n\t\ttype ipv4_addr : ipv4_addr\n\t}\n\tchain c {\n\t}\n}\n"
	for _, tc := range []struct{ name, script, want string }{
		{"jump to a missing chain", "table ip t {\n\tchain a {\n\t\tjump nope\n\t}\n}\n", `t.nft:3: chain a: jump to missing chain "nope"`},
		{"goto in a vmap element to a missing chain", "add rule ip t c ip daddr vmap { 1.2.3.4 : goto nope }\n", `t.nft:1: anonymous map element 1.2.3.4: goto to missing chain "nope"`},
		{"vmap on a data map", "add rule ip t c ip daddr vmap @dm\n", `t.nft:1: @dm is not a verdict map`},
		{"lookup of a map as a set", "add rule ip t c ip daddr @m accept\n", `t.nft:1: @m is a map, not a set`},
		{"missing set", "add rule ip t c ip daddr @nope accept\n", `t.nft:1: @nope: no such set or map in table ip t`},
		{"key type mismatch", "add rule ip t c ip daddr @ports accept\n", `t.nft:1: @ports has key type inet_service, but the rule looks up ipv4_addr`},
		{"create an existing table", "\ncreate table ip t\n", `t.nft:2: create table: table ip t already exists`},
		{"create an existing chain", "create chain ip t c\n", `t.nft:1: chain c already exists in table ip t`},
		{"bad address", "add rule ip t c ip daddr 300.1.1.1 accept\n", `t.nft:1: ip daddr: bad IPv4 address "300.1.1.1"`},
		{"unknown chain type", "add chain ip t x { type foo hook input priority 0 ; }\n", `t.nft:1: chain x: unknown chain type "foo"`},
		{"bad priority", "add chain ip t x { type filter hook input priority upwards ; }\n", `t.nft:1: chain x: bad priority "upwards"`},
		{"missing brace", "table ip u {\n\tchain a {\n", `t.nft:1: missing "}"`},
		{"unterminated string", "add rule ip t c accept comment \"x\n", `t.nft:1: unterminated string`},
		{"delete a rule with a missing handle", "delete rule ip t c handle 99\n", `t.nft:1: delete rule: no rule with handle 99 in chain c`},
		{"delete a missing table", "delete table ip nope\n", `t.nft:1: delete table: no table ip nope`},
		{"forward reference in a script", "add rule ip t c jump later\nadd chain ip t later\n", `t.nft:1: chain c: jump to missing chain "later"`},
		{"jump loop", "add chain ip t a\nadd rule ip t a jump c\nadd rule ip t c jump a\n", `jump loop`},
		{"set of the wrong data", "add element ip t ports { 1.2.3.4 }\n", `t.nft:1: element 1.2.3.4: bad port "1.2.3.4"`},
		{"duplicate set with another type", "add set ip t ports { type ipv4_addr ; }\n", `t.nft:1: set ports already exists with a different definition`},
		{"garbage", "frobnicate everything\n", `t.nft:1: expected table, add, create, insert, replace, delete or flush, found "frobnicate"`},
		{"a map key added again with another value", "add element ip t m { 1.2.3.4 : drop }\nadd element ip t m { 1.2.3.4 : accept }\n", `t.nft:2: add element m: element 1.2.3.4 already exists with another value (drop; delete it first)`},
		{"dnat in a filter chain", "add chain ip t in { type filter hook input priority 0 ; }\nadd rule ip t in jump c\nadd rule ip t c dnat to 1.2.3.4\n", `t.nft:3: chain c: dnat is not allowed here: the chain is reached from base chain in (type filter hook input); dnat needs a nat chain at prerouting or output`},
		{"masquerade in nat prerouting", "add chain ip t pre { type nat hook prerouting priority -100 ; }\nadd rule ip t pre masquerade\n", `t.nft:2: chain pre: masquerade is not allowed here`},
		{"a missing named counter", "add rule ip t c counter name \"nope\"\n", `t.nft:1: counter name "nope": no such counter in table ip t`},
		{"overlapping intervals", "add set ip t iv { type ipv4_addr ; flags interval ; }\nadd element ip t iv { 10.0.0.0/8 }\nadd element ip t iv { 10.1.0.0/16 }\n", `t.nft:3: add element iv: element 10.1.0.0/16: conflicting intervals specified (it overlaps 10.0.0.0/8)`},
		{"reject with icmpx in an ip table", "add rule ip t c reject with icmpx type admin-prohibited\n", `t.nft:1: reject with icmpx: abstracted ICMP unreachable not supported in ip tables`},
		{"reject at postrouting", "add chain ip t post { type filter hook postrouting priority 0 ; }\nadd rule ip t post jump c\nadd rule ip t c reject\n", `t.nft:3: chain c: reject is not allowed here: the chain is reached from base chain post (hook postrouting)`},
		{"a NAT port without a protocol match", "add chain ip t pre { type nat hook prerouting priority -100 ; }\nadd rule ip t pre ip daddr 1.2.3.4 dnat to 10.0.0.1:80\n", `t.nft:2: dnat: transport protocol mapping is only valid after transport protocol match`},
		{"a name too long", "add chain ip t " + strings.Repeat("x", 256) + "\n", `t.nft:1: chain name too long (256 bytes; the kernel takes at most 255)`},
		{"delete a chain in use", "add chain ip t d\nadd rule ip t d jump c\ndelete chain ip t c\n", `t.nft:3: delete chain c: it is in use (a jump from chain d): Device or resource busy`},
		{"delete a set in use", "add rule ip t c tcp dport @ports accept\ndelete set ip t ports\n", `t.nft:2: delete set ports: it is in use (a rule in chain c): Device or resource busy`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mustLoad(t, base)
			before, gen := e.String(), e.Generation()
			// A valid change before the bad line is not applied either.
			if err := e.ApplyScript([]byte("add rule ip t c counter\n"+tc.script), "t.nft"); err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			err := e.ApplyScript([]byte(tc.script), "t.nft")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if e.String() != before || e.Generation() != gen {
				t.Errorf("a failed script changed the ruleset")
			}
		})
	}
}

// TestBothSpellings: kube-proxy's input spelling and nft's listing spelling give the
// same model (a set a rule updates gets nft's default size, as the kernel lists it).
func TestBothSpellings(t *testing.T) {
	in := `add table ip t
add chain ip t a
add set ip t s { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add chain ip t c { type nat hook prerouting priority -100 ; }
add chain ip t p { type nat hook postrouting priority 100 ; }
add rule ip t p mark and 0x4000 == 0 return
add rule ip t p mark set mark xor 0x4000
add rule ip t c ip saddr != { 203.0.113.0/25 } drop
add rule ip t c meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.4 . 80 , 1 : 10.180.0.5 . 80 }
add rule ip t c update @s { ip saddr }
add rule ip t p masquerade fully-random
`
	listed := `table ip t {
	set s {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 3h
	}

	chain a {
	}

	chain c {
		type nat hook prerouting priority dstnat; policy accept;
		ip saddr != 203.0.113.0/25 drop
		meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.180.0.4 . 80, 1 : 10.180.0.5 . 80 }
		update @s { ip saddr }
	}

	chain p {
		type nat hook postrouting priority srcnat; policy accept;
		meta mark & 0x00004000 == 0x00000000 return
		meta mark set meta mark ^ 0x00004000
		masquerade fully-random
	}
}
`
	a, b := mustLoad(t, in), mustLoad(t, listed)
	if a.String() != listed {
		t.Errorf("input spelling prints\n%s\nwant\n%s", a.String(), listed)
	}
	if b.String() != listed {
		t.Errorf("listing spelling prints\n%s\nwant\n%s", b.String(), listed)
	}
}

// TestUnknownKept: expressions the emulator does not model are kept with their text,
// printed back, and never silently dropped.
func TestUnknownKept(t *testing.T) {
	e := mustLoad(t, `table inet f {
	flowtable ft {
		hook ingress priority filter
		devices = { lo }
	}

	chain input {
		type filter hook input priority filter; policy drop;
		icmp type echo-request limit rate 10/second accept
		meta skuid 1000 tcp dport 22 accept
		queue num 1
	}
}
`)
	r := e.Ruleset().Tables[0].chain("input").Rules
	var kinds []string
	for _, rule := range r {
		for _, s := range rule.Stmts {
			if u, ok := s.(*UnknownStmt); ok {
				kinds = append(kinds, u.Text)
			}
		}
	}
	want := []string{"icmp type echo-request", "limit rate 10/second", "meta skuid 1000", "queue num 1"}
	if strings.Join(kinds, "|") != strings.Join(want, "|") {
		t.Errorf("unknown statements %q, want %q", kinds, want)
	}
	out := e.String()
	for _, w := range append(want, "flowtable ft {", "devices = { lo }") {
		if !strings.Contains(out, w) {
			t.Errorf("printed ruleset lacks %q:\n%s", w, out)
		}
	}
}

func TestPriorities(t *testing.T) {
	e := mustLoad(t, `table ip t {
	chain a {
		type filter hook prerouting priority dstnat - 10; policy accept;
	}
	chain b {
		type nat hook postrouting priority srcnat + 5; policy accept;
	}
	chain c {
		type filter hook output priority -90; policy accept;
	}
}
table bridge br {
	chain d {
		type filter hook forward priority filter; policy accept;
	}
}
`)
	tb := e.Ruleset().Tables[0]
	for name, want := range map[string]int{"a": -110, "b": 105, "c": -90} {
		if got := tb.chain(name).Priority; got != want {
			t.Errorf("chain %s priority %d, want %d", name, got, want)
		}
	}
	if got := e.Ruleset().Tables[1].chain("d").Priority; got != -200 {
		t.Errorf("bridge filter priority %d, want -200", got)
	}
	out := e.String()
	for _, w := range []string{"priority dstnat - 10;", "priority srcnat + 5;", "priority -90;", "priority filter;"} {
		if !strings.Contains(out, w) {
			t.Errorf("listing lacks %q", w)
		}
	}
	if len(e.BaseChains(0)) != 1 {
		t.Errorf("bridge chains must not be evaluated: %v", e.BaseChains(0))
	}
}

// TestScriptCommands: insert/replace/delete by handle, positions, flushes, element
// deletion, table deletion, flush ruleset.
func TestScriptCommands(t *testing.T) {
	e := mustLoad(t, `add table ip t
add chain ip t c
add rule ip t c ip daddr 1.1.1.1 accept
add rule ip t c ip daddr 3.3.3.3 accept
add rule ip t c position 1 ip daddr 2.2.2.2 accept
insert rule ip t c ip daddr 0.0.0.0 accept
add set ip t s { type ipv4_addr ; flags interval ; }
add element ip t s { 10.0.0.0/8, 192.168.0.1-192.168.0.9 }
`)
	got := func() string {
		var parts []string
		for _, r := range e.Ruleset().Tables[0].chain("c").Rules {
			parts = append(parts, RuleString(r))
		}
		return strings.Join(parts, "; ")
	}
	if g := got(); g != "ip daddr 0.0.0.0 accept; ip daddr 1.1.1.1 accept; ip daddr 2.2.2.2 accept; ip daddr 3.3.3.3 accept" {
		t.Fatalf("rules %s", g)
	}
	if err := e.ApplyScript([]byte("replace rule ip t c handle 2 ip daddr 3.3.3.4 drop\ndelete rule ip t c handle 1\ndelete element ip t s { 10.0.0.0/8 }\n"), "u.nft"); err != nil {
		t.Fatal(err)
	}
	if g := got(); g != "ip daddr 0.0.0.0 accept; ip daddr 2.2.2.2 accept; ip daddr 3.3.3.4 drop" {
		t.Fatalf("rules %s", g)
	}
	if !strings.Contains(e.String(), "elements = { 192.168.0.1-192.168.0.9 }") {
		t.Errorf("element not deleted:\n%s", e.String())
	}
	if err := e.ApplyScript([]byte("flush chain ip t c\nflush set ip t s\n"), "u.nft"); err != nil {
		t.Fatal(err)
	}
	if g := got(); g != "" || strings.Contains(e.String(), "elements") {
		t.Fatalf("flush left %q", e.String())
	}
	if err := e.ApplyScript([]byte("add rule ip t c accept\ndelete chain ip t c\ndelete table ip t\nadd table ip6 x\n"), "u.nft"); err != nil {
		t.Fatal(err)
	}
	if e.String() != "table ip6 x {\n}\n" {
		t.Errorf("after delete table: %q", e.String())
	}
	if err := e.ApplyScript([]byte("flush ruleset\n"), "u.nft"); err != nil || e.String() != "" {
		t.Errorf("flush ruleset: %v %q", err, e.String())
	}
}

// TestIntervals: interval sets as nft 1.0.6 keeps them (checked in a netns): auto-merge
// merges overlapping and adjacent intervals, anonymous sets are merged and keep their
// braces, and lookups find exact elements and ranges alike.
func TestIntervals(t *testing.T) {
	e := mustLoad(t, `add table ip t
add set ip t s { type ipv4_addr ; flags interval ; auto-merge ; }
add element ip t s { 10.0.0.0/8 }
add element ip t s { 10.1.0.0/16, 11.0.0.0/8 }
add set ip t p { type inet_service ; flags interval ; }
add element ip t p { 80, 1000-2000, 443 }
add chain ip t c { type filter hook input priority 0 ; }
add rule ip t c ip saddr { 10.0.0.0/8, 10.1.0.0/16 } accept
add rule ip t c tcp dport @p drop
add rule ip t c ip saddr @s reject
`)
	out := e.String()
	for _, want := range []string{"elements = { 10.0.0.0/7 }", "ip saddr { 10.0.0.0/8 } accept", "elements = { 80,\n\t\t\t     443,\n\t\t\t     1000-2000 }"} {
		if !strings.Contains(out, want) {
			t.Errorf("listing lacks %q:\n%s", want, out)
		}
	}
	bc := e.BaseChains(1)[0]
	for _, tc := range []struct {
		src  string
		port uint16
		want Verdict
	}{{"10.2.3.4", 1, Accept}, {"192.0.2.1", 443, Drop}, {"192.0.2.1", 1500, Drop}, {"192.0.2.1", 2001, Accept}, {"11.9.9.9", 1, Reject}, {"12.0.0.1", 1, Accept}} {
		if v := e.RunChain(newTestEnv(), bc, tcp(tc.src, "192.168.0.2", tc.port), nil); v.Verdict != tc.want {
			t.Errorf("%s:%d: %v, want %v", tc.src, tc.port, v.Verdict, tc.want)
		}
	}
}

// TestIPTablesNFT: a listing with iptables-nft's tables (captured from nft 1.0.6 after
// iptables-nft commands in a netns) loads: an untranslatable match is kept as an
// assumption, and an untranslatable target ends the evaluation with UNKNOWN.
func TestIPTablesNFT(t *testing.T) {
	data, err := os.ReadFile("testdata/spellings/iptables-nft.nft")
	if err != nil {
		t.Fatal(err)
	}
	e, err := Load(data, "iptables-nft.nft")
	if err != nil {
		t.Fatal(err)
	}
	// nft lists iptables-nft's MARK as "meta mark set mark or 0x4000"; it is printed
	// in the native spelling.
	if got := e.String(); !strings.Contains(got, "\t\txt match recent counter packets 0 bytes 0 meta mark set meta mark | 0x00004000\n") ||
		!strings.Contains(got, "ct state invalid counter packets 0 bytes 0 drop") {
		t.Errorf("printed:\n%s", got)
	}
	e2 := mustLoad(t, "table ip nat {\n\tchain POSTROUTING {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tip saddr 10.0.0.0/8 counter packets 0 bytes 0 xt target MASQUERADE\n\t}\n}\n")
	v := e2.RunChain(newTestEnv(), e2.BaseChains(4)[0], tcp("10.0.0.2", "1.1.1.1", 80), nil)
	if v.Verdict != Unknown || v.Reason != "ip nat POSTROUTING line 4" {
		t.Errorf("xt target: %+v, want UNKNOWN by line 4", v)
	}
}

// TestTruncatedStatements: a statement cut short before its option's value is a load
// error naming it, not a panic (FuzzLoadListing found "log level" at a rule's end).
func TestTruncatedStatements(t *testing.T) {
	for text, want := range map[string]string{
		"table inet t {chain c {log level}}":                                            "log level: missing value",
		"table inet t {chain c {log prefix}}":                                           "log prefix: missing value",
		"table inet t {chain c {log flags}}":                                            "log flags: missing value",
		"table inet t {chain c {log flags tcp,}}":                                       "log flags: missing flag",
		"table ip t {set s {type ipv4_addr; elements = { 1.2.3.4 counter packets 1 }}}": "counter: expected packets N bytes N",
	} {
		_, err := Load([]byte(text), "cut.nft")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%q): %v, want an error containing %q", text, err, want)
		}
	}
	if _, err := Load([]byte("table inet t {chain c {log level warn flags tcp,ip}}"), "ok.nft"); err != nil {
		t.Errorf("a whole log statement: %v", err)
	}
}

// TestControlCharacters: a control character outside a string is a syntax error, as
// nft's scanner makes it ("unexpected junk" for a form feed, checked against nft 1.0);
// the loader took "\ftype" for a word, and the listing it printed did not load again
// (FuzzLoadListing).
func TestControlCharacters(t *testing.T) {
	for _, text := range []string{
		"table ip t {\n\tchain c {\n\t\f\tcounter\n\t}\n}\n",
		"table 0{chain 0{\ftype {\n}}}",
		"table ip t {\n\tchain c {\n\t\tcoun\x01ter\n\t}\n}\n",
		"table ip t {\x7f}\n",
		"table ip t {\n\tchain c {\n\t\tcounter a\\\\b\n\t}\n}\n",
		"table 0{chain 0{\\\\}}",
	} {
		if _, err := Load([]byte(text), "cc.nft"); err == nil || !strings.Contains(err.Error(), "invalid character") {
			t.Errorf("Load(%q): %v, want an invalid character error", text, err)
		}
	}
	if _, err := Load([]byte("table ip t {\r\n\tchain c {\r\n\t\tcounter comment \"a\tb\"\r\n\t}\r\n}\r\n"), "ok.nft"); err != nil {
		t.Errorf("tabs, CRLF and a tab in a string: %v", err)
	}
	if _, err := Load([]byte("table ip t {\n\tchain c {\n\t\tcounter \\\n accept\n\t}\n}\n"), "ok.nft"); err != nil {
		t.Errorf("a line continued with a backslash: %v", err)
	}
}
