package scenario

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// noRawControl reports whether an error message has no control byte (and no invalid
// UTF-8): what came from the input is quoted (%q) in messages.
func noRawControl(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 && r != '\n' || r == 0x7f {
			return false
		}
	}
	return true
}

// FuzzParseTraceTarget: trace's --to (and every step's to/dst): never a panic, errors
// with the input escaped, and a target accepted prints (String) as text that parses
// to the same target.
func FuzzParseTraceTarget(f *testing.F) {
	for _, s := range []string{
		"my-service:80", "my-service", "10.96.0.10:53", "10.96.0.10", "fd00::1", "[fd00::1]:80",
		"service:default/web:http", "service:web:80", "nodeport:default/web@node-b", "nodeport:x/y@@z",
		"nodeport:default/web:30080@node-a", "loadbalancer:default/lb:443", "pod:default/p:8080", "node:node-a:10250",
		"_http._tcp.web.default.svc.cluster.local.:80", "pod:/x:1", "service:a/b/c:1", "node:a:0", "a\x00b:80", ":", "",
	} {
		f.Add(s, uint16(80), false)
		f.Add(s, uint16(0), true)
	}
	f.Fuzz(func(t *testing.T, s string, port uint16, optional bool) {
		var tg target
		var err error
		if optional {
			tg, err = parseTarget(s, true)
		} else {
			tg, err = parseTraceTarget(s, int(port))
		}
		if err != nil {
			if !noRawControl(err.Error()) {
				t.Fatalf("%q: error with a raw control byte: %q", s, err)
			}
			return
		}
		again, err := parseTarget(tg.String(), optional)
		if err != nil {
			t.Fatalf("%q parsed to %+v, whose String %q does not parse: %v", s, tg, tg.String(), err)
		}
		if again != tg {
			t.Fatalf("%q parsed to %+v, its String %q to %+v", s, tg, tg.String(), again)
		}
	})
}

// FuzzParsePlace: trace's --from (and every step's from): never a panic, errors with
// the input escaped, and a place accepted prints as text that parses to it again.
func FuzzParsePlace(f *testing.F) {
	for _, s := range []string{"pod:default/client", "pod:client", "node:node-a", "external:laptop", "pod:/x", "pod:a/b/c", "vm:x", "pod:", "pod:a\x00"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, podOnly bool) {
		p, err := parsePlace(s, podOnly)
		if err != nil {
			if !noRawControl(err.Error()) {
				t.Fatalf("%q: error with a raw control byte: %q", s, err)
			}
			return
		}
		if podOnly && p.kind != "pod" {
			t.Fatalf("%q: pod only, got %+v", s, p)
		}
		again, err := parsePlace(p.String(), podOnly)
		if err != nil || again != p {
			t.Fatalf("%q parsed to %+v, its String %q to %+v (%v)", s, p, p.String(), again, err)
		}
		if strings.TrimSpace(p.name) == "" {
			t.Fatalf("%q: an empty name accepted: %+v", s, p)
		}
	})
}
