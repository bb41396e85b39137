package ipvs

import (
	"bufio"
	"bytes"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The ipsets of kube-proxy's IPVS mode (pkg/proxy/ipvs/ipset.go), in kube-proxy's
// ipsetInfo order.
const (
	SetLoopBack                = "KUBE-LOOP-BACK"
	SetClusterIP               = "KUBE-CLUSTER-IP"
	SetExternalIP              = "KUBE-EXTERNAL-IP"
	SetExternalIPLocal         = "KUBE-EXTERNAL-IP-LOCAL"
	SetLoadBalancer            = "KUBE-LOAD-BALANCER"
	SetLoadBalancerFW          = "KUBE-LOAD-BALANCER-FW"
	SetLoadBalancerLocal       = "KUBE-LOAD-BALANCER-LOCAL"
	SetLoadBalancerSourceIP    = "KUBE-LOAD-BALANCER-SOURCE-IP"
	SetLoadBalancerSourceCIDR  = "KUBE-LOAD-BALANCER-SOURCE-CIDR"
	SetNodePortTCP             = "KUBE-NODE-PORT-TCP"
	SetNodePortLocalTCP        = "KUBE-NODE-PORT-LOCAL-TCP"
	SetNodePortUDP             = "KUBE-NODE-PORT-UDP"
	SetNodePortLocalUDP        = "KUBE-NODE-PORT-LOCAL-UDP"
	SetNodePortSCTP            = "KUBE-NODE-PORT-SCTP-HASH"
	SetNodePortLocalSCTP       = "KUBE-NODE-PORT-LOCAL-SCTP-HASH"
	SetHealthCheckNodePort     = "KUBE-HEALTH-CHECK-NODE-PORT"
	SetIPVSAddresses           = "KUBE-IPVS-IPS"
	setTypeHashIP              = "hash:ip"
	setTypeHashIPPort          = "hash:ip,port"
	setTypeHashIPPortIP        = "hash:ip,port,ip"
	setTypeHashIPPortNet       = "hash:ip,port,net"
	setTypeBitmapPort          = "bitmap:port"
	defaultSetHashSize         = 1024
	defaultSetMaxElem          = 65536
	defaultBitmapPortRange     = "0-65535"
	maxSetNameLength           = 31
	ipv6SetPrefix, ipv4SetPref = "KUBE-6-", "KUBE-"
)

type setInfo struct {
	name, typ, comment string
}

var setInfos = []setInfo{
	{SetLoopBack, setTypeHashIPPortIP, "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"},
	{SetClusterIP, setTypeHashIPPort, "Kubernetes service cluster ip + port for masquerade purpose"},
	{SetExternalIP, setTypeHashIPPort, "Kubernetes service external ip + port for masquerade and filter purpose"},
	{SetExternalIPLocal, setTypeHashIPPort, "Kubernetes service external ip + port with externalTrafficPolicy=local"},
	{SetLoadBalancer, setTypeHashIPPort, "Kubernetes service lb portal"},
	{SetLoadBalancerFW, setTypeHashIPPort, "Kubernetes service load balancer ip + port for load balancer with sourceRange"},
	{SetLoadBalancerLocal, setTypeHashIPPort, "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"},
	{SetLoadBalancerSourceIP, setTypeHashIPPortIP, "Kubernetes service load balancer ip + port + source IP for packet filter purpose"},
	{SetLoadBalancerSourceCIDR, setTypeHashIPPortNet, "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"},
	{SetNodePortTCP, setTypeBitmapPort, "Kubernetes nodeport TCP port for masquerade purpose"},
	{SetNodePortLocalTCP, setTypeBitmapPort, "Kubernetes nodeport TCP port with externalTrafficPolicy=local"},
	{SetNodePortUDP, setTypeBitmapPort, "Kubernetes nodeport UDP port for masquerade purpose"},
	{SetNodePortLocalUDP, setTypeBitmapPort, "Kubernetes nodeport UDP port with externalTrafficPolicy=local"},
	{SetNodePortSCTP, setTypeHashIPPort, "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"},
	{SetNodePortLocalSCTP, setTypeHashIPPort, "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"},
	{SetHealthCheckNodePort, setTypeBitmapPort, "Kubernetes health check node port"},
	{SetIPVSAddresses, setTypeHashIP, "Addresses on the ipvs interface"},
}

// SetName returns the name of one of the mode's ipsets for a family: IPv6 sets are
// named "KUBE-6-..." (cut to ipset's 31 characters), so that both families' sets can
// live on one host.
func SetName(name string, ipv6 bool) string {
	if !ipv6 || !strings.HasPrefix(name, ipv4SetPref) {
		return name
	}
	name = ipv6SetPrefix + strings.TrimPrefix(name, ipv4SetPref)
	if len(name) > maxSetNameLength {
		name = name[:maxSetNameLength]
	}
	return name
}

// ipset is one of the mode's sets during a sync: its definition and the entries this
// sync wants in it.
type ipset struct {
	info   setInfo
	name   string // family-specific
	ipv6   bool
	active map[string]bool
}

func (s *ipset) add(entry string) { s.active[entry] = true }

func (s *ipset) isEmpty() bool { return len(s.active) == 0 }

func (s *ipset) comment() string { return `"` + s.info.comment + `"` }

// createLine is kube-proxy's `ipset create NAME TYPE ... -exist`.
func (s *ipset) createLine() string {
	var b strings.Builder
	b.WriteString("create " + s.name + " " + s.info.typ)
	if s.info.typ == setTypeBitmapPort {
		b.WriteString(" range " + defaultBitmapPortRange)
	} else {
		fam := "inet"
		if s.ipv6 {
			fam = "inet6"
		}
		b.WriteString(" family " + fam + " hashsize " + strconv.Itoa(defaultSetHashSize) + " maxelem " + strconv.Itoa(defaultSetMaxElem))
	}
	b.WriteString(" -exist")
	return b.String()
}

// Entries as kube-proxy's utilipset.Entry.String() writes them.

func entryIPPort(ip netip.Addr, proto string, port int) string {
	return ip.String() + "," + proto + ":" + strconv.Itoa(port)
}

func entryIPPortIP(ip netip.Addr, proto string, port int, ip2 netip.Addr) string {
	return entryIPPort(ip, proto, port) + "," + ip2.String()
}

func entryIPPortNet(ip netip.Addr, proto string, port int, net netip.Prefix) string {
	return entryIPPort(ip, proto, port) + "," + net.String()
}

// canonicalEntry rewrites an element the way `ipset save` prints it, so that what a sync
// wants and what a save lists compare equal: addresses in canonical form, a network
// covering one address without its prefix length, the protocol in lower case (tcp when
// absent, for hash types).
func canonicalEntry(typ, e string) string {
	if isCanonical(typ, e) {
		return e
	}
	parts := strings.Split(e, ",")
	for i, p := range parts {
		if proto, port, ok := strings.Cut(p, ":"); ok && !strings.Contains(port, ":") && isPort(port) {
			parts[i] = strings.ToLower(proto) + ":" + port
			continue
		}
		if isPort(p) {
			if typ != setTypeBitmapPort && i == 1 {
				parts[i] = "tcp:" + p
			}
			continue
		}
		if pr, err := netip.ParsePrefix(p); err == nil {
			pr = pr.Masked()
			if pr.Bits() == pr.Addr().BitLen() {
				parts[i] = pr.Addr().Unmap().String()
			} else {
				parts[i] = pr.String()
			}
			continue
		}
		if a, err := netip.ParseAddr(p); err == nil {
			parts[i] = a.Unmap().String()
		}
	}
	return strings.Join(parts, ",")
}

// isCanonical is a fast test for the common case: what this package writes and what
// the kernel prints (lower case, protocols present, no network prefixes, IPv4). An
// entry it does not recognise is canonicalised the slow way.
func isCanonical(typ, e string) bool {
	if typ == setTypeBitmapPort {
		return isPort(e)
	}
	colons := 0
	for i := 0; i < len(e); i++ {
		c := e[i]
		switch {
		case c >= '0' && c <= '9', c == '.', c == ',', c >= 'a' && c <= 'z':
		case c == ':':
			colons++
		default:
			return false // upper case, '/', IPv6 brackets, ...
		}
	}
	switch typ {
	case setTypeHashIP:
		return colons == 0 && !strings.Contains(e, ",")
	case setTypeHashIPPort:
		return colons == 1 && strings.Count(e, ",") == 1
	}
	return colons == 1 && strings.Count(e, ",") == 2
}

func isPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535
}

// savedSets reads `ipset save` output: set name → type and canonical entries.
type savedSet struct {
	typ     string
	entries map[string]bool
}

func parseSavedSets(data []byte) map[string]*savedSet {
	out := map[string]*savedSet{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		switch f[0] {
		case "create", "-N":
			out[f[1]] = &savedSet{typ: f[2], entries: map[string]bool{}}
		case "add", "-A":
			if s := out[f[1]]; s != nil {
				s.entries[canonicalEntry(s.typ, f[2])] = true
			}
		}
	}
	return out
}

// writeSetRestore appends the ipset restore input that brings the saved sets to the
// wanted entries: every set created with -exist (kube-proxy's ensureIPSet on every
// sync), then per set the stale entries deleted and the missing ones added, in sorted
// order (kube-proxy's syncIPSetEntries). It reports how many entries it adds and
// deletes.
func writeSetRestore(b *bytes.Buffer, sets []*ipset, saved map[string]*savedSet) (added, deleted int) {
	for _, s := range sets {
		b.WriteString(s.createLine())
		b.WriteByte('\n')
	}
	for _, s := range sets {
		cur := saved[s.name]
		want := make(map[string]string, len(s.active))
		for e := range s.active {
			want[canonicalEntry(s.info.typ, e)] = e
		}
		if cur != nil {
			var dels []string
			for e := range cur.entries {
				if _, ok := want[e]; !ok {
					dels = append(dels, e)
				}
			}
			slices.Sort(dels)
			for _, e := range dels {
				b.WriteString("del " + s.name + " " + e + "\n")
				deleted++
			}
		}
		var adds []string
		for c, e := range want {
			if cur == nil || !cur.entries[c] {
				adds = append(adds, e)
			}
		}
		slices.Sort(adds)
		for _, e := range adds {
			b.WriteString("add " + s.name + " " + e + " -exist\n")
			added++
		}
	}
	return added, deleted
}
