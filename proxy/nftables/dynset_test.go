package nftables_test

import (
	"testing"

	nftemu "github.com/clusterlab/clusterlab/proxy/nftables/emulator"
)

// TestEvaluatorDynsetImplicitSize holds the evaluator to what the kernel does with a set
// that the packet path writes (found by TestKernelDifferential; nft 1.0.6 on Linux 6.18,
// each script applied with `nft -f` in a fresh network namespace and listed back; the
// listings are pasted below):
//
//   - implicit size: a set that declares no size and that a rule's `update @set { ...
//     }` or `add @set { ... }` writes is given the size 65535 when the rule is added,
//     and nft lists "size 65535". kube-proxy's affinity sets are such sets (`add set
//     ip kube-proxy affinity-... { type ipv4_addr ; flags dynamic,timeout ; timeout
//     10800s ; }`).
//   - implicit flag: `add @set` (and `update @set`) from a rule on a set declared
//     without "flags dynamic" is accepted by nft, which gives the set the flag (and
//     the size). kube-proxy always declares the flag.
func TestEvaluatorDynsetImplicitSize(t *testing.T) {
	for _, tc := range []struct {
		name, script, kernel string
	}{
		{"implicit size", `add table ip t
add chain ip t c1
add set ip t a { type ipv4_addr ; flags dynamic,timeout ; timeout 3h ; }
add set ip t d { type ipv4_addr ; flags dynamic ; }
add rule ip t c1 update @a { ip saddr }
`, `table ip t {
	set a {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 3h
	}

	set d {
		type ipv4_addr
		flags dynamic
	}

	chain c1 {
		update @a { ip saddr }
	}
}
`},
		{"implicit flag", `add table ip t
add chain ip t c1
add set ip t e { type ipv4_addr ; }
add rule ip t c1 add @e { ip saddr }
`, `table ip t {
	set e {
		type ipv4_addr
		size 65535
		flags dynamic
	}

	chain c1 {
		add @e { ip saddr }
	}
}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := nftemu.Load([]byte(tc.kernel), "kernel")
			if err != nil {
				t.Fatal(err)
			}
			if k.String() != tc.kernel {
				t.Errorf("the kernel's listing does not round-trip through the evaluator:\n%s", k.String())
			}
			e, err := nftemu.Load([]byte(tc.script), "script")
			if err != nil {
				t.Fatalf("the evaluator refuses a script nft applies: %v", err)
			}
			if got := e.String(); got != tc.kernel {
				t.Errorf("the evaluator after the script prints\n%s\nnft lists after the same script\n%s", got, tc.kernel)
			}
		})
	}
}
