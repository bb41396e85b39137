package userspace

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// The userspace proxier's chains. Traffic from pods and other hosts meets the
// "container" chains in nat PREROUTING, traffic from the node's own processes the
// "host" chains in nat OUTPUT; portal chains match service addresses (cluster IPs,
// external IPs, load-balancer IPs), node-port chains a node port on any local address.
const (
	ChainPortalsContainer  = "KUBE-PORTALS-CONTAINER"
	ChainPortalsHost       = "KUBE-PORTALS-HOST"
	ChainNodePortContainer = "KUBE-NODEPORT-CONTAINER"
	ChainNodePortHost      = "KUBE-NODEPORT-HOST"
	ChainNodePortNonLocal  = "KUBE-NODEPORT-NON-LOCAL"
)

// JumpRule is one rule of the proxier in a built-in chain, jumping to one of its
// chains. The portal jumps go first in their chains, the node-port jumps last (a
// node-port rule matches any local address, so it must not shadow a portal).
type JumpRule struct {
	Table, Chain, Target string
	Match                []string // matches before the comment
	Comment              string
	Append               bool // -A (last in the chain); else -I (first)
}

// Spec is the rule after "-A CHAIN" as iptables-save prints it.
func (j JumpRule) Spec() string {
	var b strings.Builder
	for _, m := range j.Match {
		b.WriteString(m + " ")
	}
	fmt.Fprintf(&b, "-m comment --comment %q -j %s", j.Comment, j.Target)
	return b.String()
}

var jumpRules = []JumpRule{
	{Table: iptables.TableNAT, Chain: "PREROUTING", Target: ChainPortalsContainer, Comment: "handle ClusterIPs; NOTE: this must be before the NodePort rules"},
	{Table: iptables.TableNAT, Chain: "OUTPUT", Target: ChainPortalsHost, Comment: "handle ClusterIPs; NOTE: this must be before the NodePort rules"},
	{Table: iptables.TableNAT, Chain: "PREROUTING", Target: ChainNodePortContainer, Match: []string{"-m", "addrtype", "--dst-type", "LOCAL"}, Comment: "handle service NodePorts; NOTE: this must be the last rule in the chain", Append: true},
	{Table: iptables.TableNAT, Chain: "OUTPUT", Target: ChainNodePortHost, Match: []string{"-m", "addrtype", "--dst-type", "LOCAL"}, Comment: "handle service NodePorts; NOTE: this must be the last rule in the chain", Append: true},
	{Table: iptables.TableFilter, Chain: "INPUT", Target: ChainNodePortNonLocal, Comment: "Ensure that non-local NodePort traffic can flow"},
}

// JumpRules returns the jump rules in the order the proxier ensures them.
func JumpRules() []JumpRule { return append([]JumpRule(nil), jumpRules...) }

// Portal is one service port with the port of its proxy listener: the input of
// RenderRules.
type Portal struct {
	Service   *proxy.ServicePort
	ProxyPort uint16
}

// RuleOptions say where the rules send traffic.
type RuleOptions struct {
	// ListenIP is the proxy listeners' address (--bind-address). Unspecified (or
	// zero): the listeners take every address, and traffic from pods and other hosts is
	// REDIRECTed (to the address it arrived on); otherwise it is DNATed to ListenIP.
	ListenIP netip.Addr
	// HostIP is where the node's own traffic is DNATed when ListenIP is unspecified (a
	// REDIRECT in OUTPUT would go to 127.0.0.1, which the old proxier found replies
	// came back from the wrong address for).
	HostIP netip.Addr
}

// RenderRules writes the proxier's chains as iptables-restore input for --noflush:
// the filter table's KUBE-NODEPORT-NON-LOCAL and the nat table's four chains, each
// declared (so flushed) and refilled, in the order of portals. Per portal, following
// kube-proxy's userspace proxier:
//
//   - cluster IP and each load-balancer IP: a KUBE-PORTALS-CONTAINER rule redirecting
//     ip:port to the listener, a KUBE-PORTALS-HOST rule DNATing it to HostIP:listener;
//   - each external IP: two KUBE-PORTALS-CONTAINER rules, one for traffic that did not
//     come in through a bridge port ("-m physdev ! --physdev-is-in"), one for an
//     external IP that is a local address, and a KUBE-PORTALS-HOST rule for the
//     latter;
//   - a node port: KUBE-NODEPORT-CONTAINER (redirect), KUBE-NODEPORT-HOST (DNAT), and
//     a KUBE-NODEPORT-NON-LOCAL rule accepting new connections to the listener port
//     past a default-deny INPUT.
func RenderRules(portals []Portal, o RuleOptions) []byte {
	var filter, pc, ph, nc, nh bytes.Buffer
	for _, pt := range portals {
		sp := pt.Service
		w := ruleWriter{sp: sp, proxyPort: pt.ProxyPort, o: o}
		pc.WriteString(w.container(sp.ClusterIP, sp.Port, ""))
		ph.WriteString(w.host(sp.ClusterIP, sp.Port, false))
		for _, ip := range sp.ExternalIPs {
			pc.WriteString(w.container(ip, sp.Port, "-m physdev ! --physdev-is-in "))
			pc.WriteString(w.container(ip, sp.Port, "-m addrtype --dst-type LOCAL "))
			ph.WriteString(w.host(ip, sp.Port, true))
		}
		for _, ip := range sp.LoadBalancerVIPs {
			pc.WriteString(w.container(ip, sp.Port, ""))
			ph.WriteString(w.host(ip, sp.Port, false))
		}
		if sp.NodePort != 0 {
			nc.WriteString(w.nodePortContainer())
			nh.WriteString(w.nodePortHost())
			filter.WriteString(w.nonLocal())
		}
	}
	var out bytes.Buffer
	out.WriteString("*filter\n:" + ChainNodePortNonLocal + " - [0:0]\n")
	out.Write(filter.Bytes())
	out.WriteString("COMMIT\n*nat\n")
	for _, c := range []string{ChainPortalsContainer, ChainPortalsHost, ChainNodePortContainer, ChainNodePortHost} {
		out.WriteString(":" + c + " - [0:0]\n")
	}
	// Grouped by chain, as iptables-save lists them.
	for _, b := range []*bytes.Buffer{&pc, &ph, &nc, &nh} {
		out.Write(b.Bytes())
	}
	out.WriteString("COMMIT\n")
	return out.Bytes()
}

type ruleWriter struct {
	sp        *proxy.ServicePort
	proxyPort uint16
	o         RuleOptions
}

func (w ruleWriter) proto() string { return strings.ToLower(string(w.sp.Protocol)) }

// common is "-p P -m comment --comment NAME -m P --dport PORT " (iptables-save order:
// the -d header field goes before it).
func (w ruleWriter) common(port int) string {
	p := w.proto()
	return fmt.Sprintf("-p %s -m comment --comment %s -m %s --dport %d ", p, quoteComment(w.sp.Name.String()), p, port)
}

func quoteComment(s string) string { return strconv.Quote(s) }

func hostCIDR(ip netip.Addr) string { return netip.PrefixFrom(ip, ip.BitLen()).String() }

func (w ruleWriter) redirectOrDNAT() string {
	if !w.o.ListenIP.IsValid() || w.o.ListenIP.IsUnspecified() {
		return fmt.Sprintf("-j REDIRECT --to-ports %d\n", w.proxyPort)
	}
	return "-j DNAT --to-destination " + netip.AddrPortFrom(w.o.ListenIP, w.proxyPort).String() + "\n"
}

func (w ruleWriter) dnatHost() string {
	ip := w.o.ListenIP
	if !ip.IsValid() || ip.IsUnspecified() {
		ip = w.o.HostIP
	}
	return "-j DNAT --to-destination " + netip.AddrPortFrom(ip, w.proxyPort).String() + "\n"
}

func (w ruleWriter) container(ip netip.Addr, port int, extra string) string {
	return "-A " + ChainPortalsContainer + " -d " + hostCIDR(ip) + " " + w.common(port) + extra + w.redirectOrDNAT()
}

func (w ruleWriter) host(ip netip.Addr, port int, dstLocal bool) string {
	extra := ""
	if dstLocal {
		extra = "-m addrtype --dst-type LOCAL "
	}
	return "-A " + ChainPortalsHost + " -d " + hostCIDR(ip) + " " + w.common(port) + extra + w.dnatHost()
}

func (w ruleWriter) nodePortContainer() string {
	return "-A " + ChainNodePortContainer + " " + w.common(w.sp.NodePort) + w.redirectOrDNAT()
}

func (w ruleWriter) nodePortHost() string {
	return "-A " + ChainNodePortHost + " " + w.common(w.sp.NodePort) + w.dnatHost()
}

func (w ruleWriter) nonLocal() string {
	return "-A " + ChainNodePortNonLocal + " " + w.common(int(w.proxyPort)) + "-m state --state NEW -j ACCEPT\n"
}

// ensureJumps creates the proxier's chains that are missing and adds the jump rules
// that are missing (a rule in the right built-in chain jumping to the target counts
// as present, whatever its spelling), with one --noflush restore. It returns the input
// it restored (nil if nothing was missing).
func ensureJumps(ctx context.Context, ipt iptables.Interface) ([]byte, error) {
	saved, err := ipt.Save(ctx, iptables.TableFilter, iptables.TableNAT)
	if err != nil {
		return nil, fmt.Errorf("iptables-save: %w", err)
	}
	have := iptables.ParseSave(saved)
	var out bytes.Buffer
	for _, table := range []string{iptables.TableFilter, iptables.TableNAT} {
		var lines []string
		created := map[string]bool{}
		for _, j := range jumpRules {
			if j.Table != table {
				continue
			}
			if !have.HasChain(table, j.Target) && !created[j.Target] {
				created[j.Target] = true
				lines = append(lines, ":"+j.Target+" - [0:0]")
			}
			if !have.Jumps(table, j.Chain, j.Target) {
				op := "-I "
				if j.Append {
					op = "-A "
				}
				lines = append(lines, op+j.Chain+" "+j.Spec())
			}
		}
		if len(lines) == 0 {
			continue
		}
		// Chain declarations first: a rule may only jump to a chain that exists.
		var chains, rules []string
		for _, l := range lines {
			if strings.HasPrefix(l, ":") {
				chains = append(chains, l)
			} else {
				rules = append(rules, l)
			}
		}
		out.WriteString("*" + table + "\n")
		for _, l := range append(chains, rules...) {
			out.WriteString(l + "\n")
		}
		out.WriteString("COMMIT\n")
	}
	if out.Len() == 0 {
		return nil, nil
	}
	if err := ipt.Restore(ctx, out.Bytes(), iptables.RestoreOptions{NoFlush: true}); err != nil {
		return out.Bytes(), fmt.Errorf("inserting jump rules: %w", err)
	}
	return out.Bytes(), nil
}
