// Package realtool holds the real-tool check of clusterlab's rule generators: its test
// feeds what the generators write to the tools a node would load it with, inside a
// throwaway network namespace, and fails on any input they refuse.
//
//	testdata/generator/**/*.golden ───────────────┐
//	testdata/ipvsmode/*.golden (ipset, iptables) ─┤   ip netns exec NS
//	rapid clusters (proptest.Cases, a Store) ─────┼─▶ iptables-{nft,legacy}-restore --test
//	  → iptables.Render, nftables.Render,         │   ip6tables-{nft,legacy}-restore --test
//	    the IPVS proxier's restore input          │   ipset restore (the IPVS mode's sets)
//	testdata/generator/cli/cluster-nftables ──────┘   nft --check -f -
//
// It needs root, ip, and the tools; a variant whose tool is missing is skipped and
// said so. There is no non-test code: the package exists so that the check, which
// imports every generator and the property kit, has a test binary of its own.
package realtool
