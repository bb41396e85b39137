package userspace

import (
	"strings"
	"testing"
)

// FuzzParseSave: the lenient iptables-save reader behind the jump-rule check never
// panics, and a rule line it reads with "-j TARGET" counts as a jump.
func FuzzParseSave(f *testing.F) {
	f.Add("*nat\n:PREROUTING ACCEPT [0:0]\n[1:2] -A PREROUTING -m comment --comment \"x y\" -j KUBE-PORTALS-CONTAINER\nCOMMIT\n")
	f.Add("*filter\n:INPUT ACCEPT\n-A INPUT -j KUBE-NODEPORT-NON-LOCAL\n*filter\n-A INPUT --jump X\n")
	f.Add("[\n*\n:\n-A\n-A \n")
	f.Fuzz(func(t *testing.T, data string) {
		tables := parseSave([]byte(data))
		for name, tb := range tables {
			for chain, rules := range tb.rules {
				for _, r := range rules {
					fs := strings.Fields(r)
					for i := 0; i+1 < len(fs); i++ {
						if fs[i] == "-j" && !tb.jumps(chain, fs[i+1]) {
							t.Fatalf("table %s chain %s: rule %q jumps to %s, not reported", name, chain, r, fs[i+1])
						}
					}
				}
			}
		}
	})
}
