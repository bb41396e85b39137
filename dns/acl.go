package dns

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
)

// RecursionACL is the set of client networks allowed to have queries forwarded to the
// upstream (CoreDNS's acl plugin, BIND's allow-recursion). It may be replaced while the
// server runs (Set).
type RecursionACL struct {
	p atomic.Pointer[[]netip.Prefix]
}

// NewRecursionACL returns an ACL allowing the given networks.
func NewRecursionACL(prefixes ...netip.Prefix) *RecursionACL {
	a := new(RecursionACL)
	a.Set(prefixes)
	return a
}

// Set replaces the allowed networks.
func (a *RecursionACL) Set(prefixes []netip.Prefix) {
	ps := make([]netip.Prefix, len(prefixes))
	for i, p := range prefixes {
		ps[i] = p.Masked()
	}
	a.p.Store(&ps)
}

// Prefixes returns the allowed networks.
func (a *RecursionACL) Prefixes() []netip.Prefix {
	if ps := a.p.Load(); ps != nil {
		return append([]netip.Prefix(nil), *ps...)
	}
	return nil
}

// Allows reports whether a client at addr may recurse.
func (a *RecursionACL) Allows(addr netip.Addr) bool {
	addr = addr.Unmap()
	ps := a.p.Load()
	if ps == nil {
		return false
	}
	for _, p := range *ps {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// String lists the networks, comma-separated.
func (a *RecursionACL) String() string {
	var parts []string
	for _, p := range a.Prefixes() {
		parts = append(parts, p.String())
	}
	return strings.Join(parts, ",")
}

// LoopbackPrefixes are the loopback networks, always in the default recursion ACL.
var LoopbackPrefixes = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// DefaultPodCIDR is the cluster's pod network when the manifests' Nodes give none
// (clusterlab's default cluster CIDR, as in cluster.Config).
var DefaultPodCIDR = netip.MustParsePrefix("10.244.0.0/16")

// ParseAllowRecursion parses the value of --allow-recursion: networks (CIDR) or single
// addresses, comma-separated. An empty value allows no client.
func ParseAllowRecursion(list []string) ([]netip.Prefix, error) {
	out := []netip.Prefix{}
	for _, item := range list {
		for _, s := range strings.Split(item, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p.Masked())
				continue
			}
			if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
				out = append(out, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
			return nil, fmt.Errorf("--allow-recursion %q: not a network: want CIDR (10.0.0.0/8, fd00::/8) or an address", s)
		}
	}
	return out, nil
}

// recursionAllowed reports whether the query's client may have it forwarded: always
// without an ACL, or when the client's address is unknown (Handle called directly).
func (s *Server) recursionAllowed(ctx context.Context) bool {
	if s.cfg.AllowRecursion == nil {
		return true
	}
	c, ok := clientOf(ctx)
	return !ok || s.cfg.AllowRecursion.Allows(c)
}
