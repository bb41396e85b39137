package ipvs

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// The iptables chains of kube-proxy's IPVS mode (pkg/proxy/ipvs/proxier.go).
const (
	ChainServices                 = "KUBE-SERVICES"
	ChainProxyFirewall            = "KUBE-PROXY-FIREWALL"
	ChainSourceRangesFirewall     = "KUBE-SOURCE-RANGES-FIREWALL"
	ChainPostrouting              = "KUBE-POSTROUTING"
	ChainMarkMasq                 = "KUBE-MARK-MASQ"
	ChainNodePort                 = "KUBE-NODE-PORT"
	ChainForward                  = "KUBE-FORWARD"
	ChainLoadBalancer             = "KUBE-LOAD-BALANCER"
	ChainIPVSFilter               = "KUBE-IPVS-FILTER"
	ChainIPVSOutFilter            = "KUBE-IPVS-OUT-FILTER"
	tableNAT, tableFilter         = iptables.TableNAT, iptables.TableFilter
	commentServicePortals         = "kubernetes service portals"
	commentPostrouting            = "kubernetes postrouting rules"
	commentForwarding             = "kubernetes forwarding rules"
	commentHealthCheck            = "kubernetes health check rules"
	commentFirewall               = "kube-proxy firewall rules"
	commentIPVSFilter             = "kubernetes ipvs access filter"
	commentForwardingConntrack    = "kubernetes forwarding conntrack rule"
	commentServiceTrafficNeedSNAT = "kubernetes service traffic requiring SNAT"
)

// jumpRules are kube-proxy's iptablesJumpChain: the rules it ensures at the top of the
// built-in chains (iptables -C, then -I when missing), in the order it ensures them.
var jumpRules = []iptables.JumpRule{
	{Table: tableNAT, Chain: "OUTPUT", Target: ChainServices, Comment: commentServicePortals},
	{Table: tableNAT, Chain: "PREROUTING", Target: ChainServices, Comment: commentServicePortals},
	{Table: tableNAT, Chain: "POSTROUTING", Target: ChainPostrouting, Comment: commentPostrouting},
	{Table: tableFilter, Chain: "FORWARD", Target: ChainForward, Comment: commentForwarding},
	{Table: tableFilter, Chain: "INPUT", Target: ChainNodePort, Comment: commentHealthCheck},
	{Table: tableFilter, Chain: "INPUT", Target: ChainProxyFirewall, Comment: commentFirewall},
	{Table: tableFilter, Chain: "FORWARD", Target: ChainProxyFirewall, Comment: commentFirewall},
	{Table: tableFilter, Chain: "INPUT", Target: ChainIPVSFilter, Comment: commentIPVSFilter},
	{Table: tableFilter, Chain: "OUTPUT", Target: ChainIPVSOutFilter, Comment: commentIPVSFilter},
}

// JumpRules returns the jump rules the IPVS mode ensures, in the order it ensures them
// (each missing one is inserted at the top of its chain).
func JumpRules() []iptables.JumpRule { return append([]iptables.JumpRule(nil), jumpRules...) }

// modeChains are kube-proxy's iptablesChains: declared (created or flushed) in every
// restore.
var modeChains = []struct{ table, chain string }{
	{tableNAT, ChainServices},
	{tableNAT, ChainPostrouting},
	{tableNAT, ChainNodePort},
	{tableNAT, ChainLoadBalancer},
	{tableNAT, ChainMarkMasq},
	{tableFilter, ChainForward},
	{tableFilter, ChainNodePort},
	{tableFilter, ChainProxyFirewall},
	{tableFilter, ChainSourceRangesFirewall},
	{tableFilter, ChainIPVSFilter},
	{tableFilter, ChainIPVSOutFilter},
}

// setChainRule is kube-proxy's ipsetWithIptablesChain: for a non-empty set, one rule in
// the chain `from` matching the set and jumping to `to`. The local NodePort sets come
// before the general ones, so that Local traffic returns before being marked.
type setChainRule struct {
	set, table, from, to, match, proto string
}

var setChainRules = []setChainRule{
	{SetLoopBack, tableNAT, ChainPostrouting, "MASQUERADE", "dst,dst,src", ""},
	{SetLoadBalancer, tableNAT, ChainServices, ChainLoadBalancer, "dst,dst", ""},
	{SetLoadBalancerLocal, tableNAT, ChainLoadBalancer, "RETURN", "dst,dst", ""},
	{SetNodePortLocalTCP, tableNAT, ChainNodePort, "RETURN", "dst", "tcp"},
	{SetNodePortTCP, tableNAT, ChainNodePort, ChainMarkMasq, "dst", "tcp"},
	{SetNodePortLocalUDP, tableNAT, ChainNodePort, "RETURN", "dst", "udp"},
	{SetNodePortUDP, tableNAT, ChainNodePort, ChainMarkMasq, "dst", "udp"},
	{SetNodePortLocalSCTP, tableNAT, ChainNodePort, "RETURN", "dst,dst", "sctp"},
	{SetNodePortSCTP, tableNAT, ChainNodePort, ChainMarkMasq, "dst,dst", "sctp"},
	{SetLoadBalancerFW, tableFilter, ChainProxyFirewall, ChainSourceRangesFirewall, "dst,dst", ""},
	{SetLoadBalancerSourceCIDR, tableFilter, ChainSourceRangesFirewall, "RETURN", "dst,dst,src", ""},
	{SetLoadBalancerSourceIP, tableFilter, ChainSourceRangesFirewall, "RETURN", "dst,dst,src", ""},
}

// noNodeAccess is an LB VIP:port whose source ranges leave out the node: node traffic
// to it is dropped in KUBE-IPVS-OUT-FILTER (k8s #119656).
type noNodeAccess struct {
	ip    string
	proto string
	port  int
}

// ruleWriter collects the restore input of one sync: nat chains and rules, then filter
// chains and rules, as kube-proxy's natChains/natRules/filterChains/filterRules.
type ruleWriter struct {
	natChains, natRules, filterChains, filterRules bytes.Buffer
}

func (w *ruleWriter) line(buf *bytes.Buffer, words ...string) {
	for i, s := range words {
		if i > 0 {
			buf.WriteByte(' ')
		}
		buf.WriteString(s)
	}
	buf.WriteByte('\n')
}

// writeRules is kube-proxy's createAndLinkKubeChain (the chain lines) and
// writeIptablesRules.
func (p *Proxier) writeRules(sets map[string]*ipset, noNode []noNodeAccess) []byte {
	w := &p.rules
	w.natChains.Reset()
	w.natRules.Reset()
	w.filterChains.Reset()
	w.filterRules.Reset()
	w.natChains.WriteString("*nat\n")
	w.filterChains.WriteString("*filter\n")
	for _, c := range modeChains {
		if c.table == tableNAT {
			w.natChains.WriteString(":" + c.chain + " - [0:0]\n")
		} else {
			w.filterChains.WriteString(":" + c.chain + " - [0:0]\n")
		}
	}
	nat, filter := &w.natRules, &w.filterRules

	// Connections to localhost leave the service chain at once.
	lo := "127.0.0.0/8"
	if p.ipv6 {
		lo = "::1/128"
	}
	w.line(nat, "-A", ChainServices, "-s", lo, "-j", "RETURN")

	for _, r := range setChainRules {
		s := sets[r.set]
		if s == nil || s.isEmpty() {
			continue
		}
		args := []string{"-A", r.from}
		if r.proto != "" {
			args = append(args, "-p", r.proto)
		}
		args = append(args, "-m", "comment", "--comment", s.comment(), "-m", "set", "--match-set", s.name, r.match, "-j", r.to)
		if r.table == tableFilter {
			w.line(filter, args...)
		} else {
			w.line(nat, args...)
		}
	}

	if s := sets[SetClusterIP]; !s.isEmpty() {
		args := []string{"-A", ChainServices, "-m", "comment", "--comment", s.comment(), "-m", "set", "--match-set", s.name}
		switch {
		case p.cfg.Node.MasqueradeAll:
			args = append(args, "dst,dst")
		case p.detector.IsImplemented():
			// Off-cluster traffic to a VIP (a static route to the service range through
			// any node) may leave the node again: masquerade it.
			args = append(append(args, "dst,dst"), p.detector.IfNotLocal()...)
		default:
			// Node-originated traffic gets a VIP as its source (the VIPs are local
			// addresses): masquerade traffic from a VIP to a service port.
			args = append(args, "src,dst")
		}
		w.line(nat, append(args, "-j", ChainMarkMasq)...)
	}

	externalIPRules := func(args []string) {
		// Traffic to an external IP from off the machine (not from a bridge, not
		// local), and traffic to an external IP that is a local address, is accepted.
		w.line(nat, append(append([]string(nil), args...), "-m", "physdev", "!", "--physdev-is-in", "-m", "addrtype", "!", "--src-type", "LOCAL", "-j", "ACCEPT")...)
		w.line(nat, append(append([]string(nil), args...), "-m", "addrtype", "--dst-type", "LOCAL", "-j", "ACCEPT")...)
	}
	if s := sets[SetExternalIP]; !s.isEmpty() {
		args := []string{"-A", ChainServices, "-m", "comment", "--comment", s.comment(), "-m", "set", "--match-set", s.name, "dst,dst"}
		w.line(nat, append(append([]string(nil), args...), "-j", ChainMarkMasq)...)
		externalIPRules(args)
	}
	if s := sets[SetExternalIPLocal]; !s.isEmpty() {
		externalIPRules([]string{"-A", ChainServices, "-m", "comment", "--comment", s.comment(), "-m", "set", "--match-set", s.name, "dst,dst"})
	}

	w.line(nat, "-A", ChainServices, "-m", "addrtype", "--dst-type", "LOCAL", "-j", ChainNodePort)
	w.line(nat, "-A", ChainLoadBalancer, "-j", ChainMarkMasq)
	w.line(filter, "-A", ChainSourceRangesFirewall, "-j", "DROP")
	for _, e := range noNode {
		w.line(filter, "-A", ChainIPVSOutFilter, "-s", e.ip, "-m", "ipvs", "--vaddr", e.ip, "--vproto", e.proto, "--vport", strconv.Itoa(e.port), "-j", "DROP")
	}
	// Accept traffic to virtual services, in case other rules would block it.
	for _, name := range []string{SetClusterIP, SetLoadBalancer} {
		if s := sets[name]; !s.isEmpty() {
			w.line(nat, "-A", ChainServices, "-m", "set", "--match-set", s.name, "dst,dst", "-j", "ACCEPT")
		}
	}
	mark := p.mark + "/" + p.mark
	w.line(filter, "-A", ChainForward, "-m", "comment", "--comment", `"`+commentForwarding+`"`, "-m", "mark", "--mark", mark, "-j", "ACCEPT")
	w.line(filter, "-A", ChainForward, "-m", "comment", "--comment", `"`+commentForwardingConntrack+`"`, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
	hc := sets[SetHealthCheckNodePort]
	w.line(filter, "-A", ChainNodePort, "-m", "comment", "--comment", hc.comment(), "-m", "set", "--match-set", hc.name, "dst", "-j", "ACCEPT")
	// The VIPs on the dummy interface would expose every port of the host (k8s #72236):
	// only the service ports pass.
	for _, name := range []string{SetLoadBalancer, SetClusterIP, SetExternalIP, SetExternalIPLocal} {
		w.line(filter, "-A", ChainIPVSFilter, "-m", "set", "--match-set", sets[name].name, "dst,dst", "-j", "RETURN")
	}
	w.line(filter, "-A", ChainIPVSFilter, "-m", "set", "--match-set", hc.name, "dst", "-j", "RETURN")
	w.line(filter, "-A", ChainIPVSFilter, "-m", "conntrack", "--ctstate", "NEW", "-m", "set", "--match-set", sets[SetIPVSAddresses].name, "dst", "-j", "REJECT")

	w.line(nat, "-A", ChainPostrouting, "-m", "mark", "!", "--mark", mark, "-j", "RETURN")
	w.line(nat, "-A", ChainPostrouting, "-j", "MARK", "--xor-mark", p.mark)
	masq := []string{"-A", ChainPostrouting, "-m", "comment", "--comment", `"` + commentServiceTrafficNeedSNAT + `"`, "-j", "MASQUERADE"}
	if !p.cfg.NoRandomFully {
		masq = append(masq, "--random-fully")
	}
	w.line(nat, masq...)
	w.line(nat, "-A", ChainMarkMasq, "-j", "MARK", "--or-mark", p.mark)
	filter.WriteString("COMMIT\n")
	nat.WriteString("COMMIT\n")

	out := p.restoreBuf[:0]
	out = append(out, w.natChains.Bytes()...)
	out = append(out, w.natRules.Bytes()...)
	out = append(out, w.filterChains.Bytes()...)
	out = append(out, w.filterRules.Bytes()...)
	p.restoreBuf = out
	return out
}

// jumpRestore is kube-proxy's createAndLinkKubeChain as one restore: the mode's chains
// that do not exist yet, and the jump rules that are missing, inserted at the top of
// their built-in chains in kube-proxy's order. nil if nothing is missing.
func jumpRestore(saved *iptables.Saved) []byte {
	var out bytes.Buffer
	for _, table := range []string{tableFilter, tableNAT} {
		var lines []string
		for _, c := range modeChains {
			if c.table == table && !saved.HasChain(table, c.chain) {
				lines = append(lines, ":"+c.chain+" - [0:0]")
			}
		}
		for _, j := range jumpRules {
			if j.Table == table && !saved.HasRule(table, j.Chain, j.Spec()) {
				lines = append(lines, "-I "+j.Chain+" "+j.Spec())
			}
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(&out, "*%s\n%s\nCOMMIT\n", table, strings.Join(lines, "\n"))
	}
	if out.Len() == 0 {
		return nil
	}
	return out.Bytes()
}
