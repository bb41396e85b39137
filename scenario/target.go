package scenario

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// target is a parsed destination (Traffic.To, ConntrackCheck.Dst).
type target struct {
	kind string         // addr, name, service, nodeport, loadbalancer, pod, node
	addr netip.AddrPort // kind addr (port may be 0 in conntrack checks)
	host string         // DNS name (name); NS/NAME (service, nodeport, loadbalancer, pod); node name (node)
	port string         // a number, or a port name (service kinds); "" for any / the first
	node string         // nodeport's node
}

func (t target) String() string {
	switch t.kind {
	case "addr":
		return t.addr.String()
	case "name":
		switch t.host {
		case "service", "loadbalancer", "pod", "node", "nodeport":
			// A name spelled like a target kind keeps its root dot: "node.:80" is the
			// host "node", "node:80" a node.
			return t.host + ".:" + t.port
		}
		return t.host + ":" + t.port
	case "nodeport":
		s := "nodeport:" + t.host
		if t.port != "" {
			s += ":" + t.port
		}
		return s + "@" + t.node
	}
	s := t.kind + ":" + t.host
	if t.port != "" {
		s += ":" + t.port
	}
	return s
}

const targetForms = "IP:PORT, NAME:PORT (a DNS name), service:NS/NAME:PORT, nodeport:NS/NAME[:PORT]@NODE, loadbalancer:NS/NAME:PORT, pod:NS/NAME:PORT or node:NAME:PORT"

// parseTarget parses a destination. portOptional allows a missing port (conntrack checks).
func parseTarget(s string, portOptional bool) (target, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return target{}, fmt.Errorf("want a destination: %s", targetForms)
	}
	if kind, rest, ok := strings.Cut(s, ":"); ok {
		switch kind {
		case "service", "loadbalancer", "pod", "node", "nodeport":
			if strings.ContainsAny(rest, ":@/") || portOptional || kind == "nodeport" {
				return parseKindTarget(kind, rest, portOptional)
			}
		}
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 && !portOptional {
			return target{}, fmt.Errorf("%q: want a port in 1-65535", s)
		}
		return target{kind: "addr", addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		if !portOptional {
			return target{}, fmt.Errorf("%q: want IP:PORT (a port is required)", s)
		}
		return target{kind: "addr", addr: netip.AddrPortFrom(a.Unmap(), 0)}, nil
	}
	host, port, ok := strings.Cut(s, ":")
	if !ok {
		if portOptional {
			return target{}, fmt.Errorf("%q: want an IP address or one of %s", s, targetForms)
		}
		return target{}, fmt.Errorf("%q: want one of %s", s, targetForms)
	}
	if err := checkPortNumber(port); err != nil {
		return target{}, fmt.Errorf("%q: %v", s, err)
	}
	if !validDNSName(host) {
		return target{}, fmt.Errorf("%q: %q is neither an IP address nor a DNS name; want one of %s", s, host, targetForms)
	}
	name := strings.TrimSuffix(host, ".")
	if a, err := netip.ParseAddr(name); err == nil {
		// "10.96.0.10.:80": an address written as a rooted name (no DNS name is all
		// digits in its last label) is the address, as it prints.
		n, _ := strconv.Atoi(port)
		return target{kind: "addr", addr: netip.AddrPortFrom(a.Unmap(), uint16(n))}, nil
	}
	return target{kind: "name", host: name, port: port}, nil
}

func parseKindTarget(kind, rest string, portOptional bool) (target, error) {
	t := target{kind: kind}
	orig := kind + ":" + rest
	if kind == "nodeport" {
		var node string
		var ok bool
		rest, node, ok = strings.Cut(rest, "@")
		if !ok || node == "" {
			return target{}, fmt.Errorf("%q: want nodeport:NS/NAME[:PORT]@NODE (the node whose address to use)", orig)
		}
		if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
			return target{}, fmt.Errorf("%q: node %q: %s", orig, node, strings.Join(errs, "; "))
		}
		t.node = node
	}
	name, port, hasPort := strings.Cut(rest, ":")
	if name == "" {
		return target{}, fmt.Errorf("%q: the %s name is missing", orig, kind)
	}
	if kind != "node" {
		ns, n, ok := strings.Cut(name, "/")
		if !ok {
			ns, n = "default", name
		}
		if ns == "" || n == "" || strings.Contains(n, "/") {
			return target{}, fmt.Errorf("%q: want NAMESPACE/NAME", orig)
		}
		name = ns + "/" + n
	}
	t.host = name
	switch {
	case hasPort:
		if port == "" {
			return target{}, fmt.Errorf("%q: empty port", orig)
		}
		if kind == "pod" || kind == "node" {
			if err := checkPortNumber(port); err != nil {
				return target{}, fmt.Errorf("%q: %v", orig, err)
			}
		} else if _, err := strconv.Atoi(port); err == nil {
			if err := checkPortNumber(port); err != nil {
				return target{}, fmt.Errorf("%q: %v", orig, err)
			}
		}
		t.port = port
	case kind == "nodeport" || portOptional:
	default:
		return target{}, fmt.Errorf("%q: a port is required (%s:%s:PORT)", orig, kind, printable(name))
	}
	return t, nil
}

// printable is s, or s quoted (strconv.Quote) when it has a byte a terminal would
// not show as itself: input is never written raw into messages.
func printable(s string) string {
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}

func checkPortNumber(p string) error {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want a number in 1-65535", p)
	}
	return nil
}

// validDNSName accepts names made of labels of letters, digits and dashes (underscores
// too, for _port._proto SRV names), with an optional trailing dot.
func validDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// place is a parsed traffic source (Traffic.From).
type place struct {
	kind string // pod, node, external
	name string // NS/NAME for pods
}

func (p place) String() string { return p.kind + ":" + p.name }

func parsePlace(s string, podOnly bool) (place, error) {
	kind, name, ok := strings.Cut(strings.TrimSpace(s), ":")
	want := "pod:NAMESPACE/NAME, node:NAME or external:NAME"
	if podOnly {
		want = "pod:NAMESPACE/NAME"
	}
	if !ok || name == "" {
		return place{}, fmt.Errorf("%q: want %s", s, want)
	}
	switch kind {
	case "pod":
		ns, n, ok := strings.Cut(name, "/")
		if !ok {
			ns, n = "default", name
		}
		if ns == "" || n == "" || strings.Contains(n, "/") {
			return place{}, fmt.Errorf("%q: want pod:NAMESPACE/NAME", s)
		}
		return place{kind: "pod", name: ns + "/" + n}, nil
	case "node", "external":
		if podOnly {
			return place{}, fmt.Errorf("%q: want %s (names are resolved by a pod's resolver)", s, want)
		}
		return place{kind: kind, name: name}, nil
	}
	return place{}, fmt.Errorf("%q: want %s", s, want)
}
