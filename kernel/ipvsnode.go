package kernel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// The rest of what kube-proxy's IPVS mode writes on a node, besides IPVS itself (the
// IPVS adapter), the iptables rules (IPTables) and the ipsets (proxy/ipvs.ExecIPSets):
// the dummy interface its virtual addresses are bound to (IPVSNetlink) and the sysctls
// it sets at start-up (NetnsSysctl).

// IPVSNetlink is proxy/ipvs.Netlink on a real kernel: the dummy interface kube-ipvs0 and
// its addresses, managed with iproute2 inside a named network namespace (`ip netns
// exec NAME ip ...`, so every command is one a person can paste), as kube-proxy's
// netlink handle does with netlink calls:
//
//	EnsureDummyDevice  ip -o link show dev NAME; if missing: ip link add NAME type dummy
//	LocalAddresses     ip -o addr show [dev NAME]  (every address, loopback included)
//	BindAddress        ip addr add ADDR/32 dev NAME   (or /128; "File exists" is success)
//	UnbindAddress      ip addr del ADDR/32 dev NAME
//
// The dummy interface stays down, as kube-proxy leaves it: an address on a down
// interface is still local (the kernel's local routing table has it), which is all IPVS
// needs to see connections to it.
type IPVSNetlink struct {
	netns string
	run   runner
}

var _ ipvs.Netlink = (*IPVSNetlink)(nil)

// NewIPVSNetlink returns the adapter for a named network namespace (HostNamespace for
// the caller's own; "" is ErrNoNamespace).
func NewIPVSNetlink(netns string) (*IPVSNetlink, error) {
	if err := checkNetns("ipvs netlink", netns); err != nil {
		return nil, err
	}
	return &IPVSNetlink{netns: netns, run: execRunner{}}, nil
}

func (l *IPVSNetlink) ip(args ...string) (result, error) {
	c := command{argv: inNetnsArgv(l.netns, append([]string{"ip"}, args...))}
	r := l.run.run(context.Background(), c)
	if ce := commandError(c, r); ce != nil {
		return r, ce
	}
	return r, nil
}

// EnsureDummyDevice implements ipvs.Netlink.
func (l *IPVSNetlink) EnsureDummyDevice(name string) (bool, error) {
	if err := checkIfName(name); err != nil {
		return false, err
	}
	if _, err := l.ip("-o", "link", "show", "dev", name); err == nil {
		return true, nil
	} else if !strings.Contains(err.Error(), "does not exist") {
		return false, err
	}
	if _, err := l.ip("link", "add", name, "type", "dummy"); err != nil {
		return false, err
	}
	return false, nil
}

// LocalAddresses implements ipvs.Netlink: the addresses of dev, or of every interface
// when dev is "" (parsed from `ip -o addr show`). A missing dev is an error matching
// ipvs.ErrNotFound.
func (l *IPVSNetlink) LocalAddresses(dev string) ([]netip.Addr, error) {
	args := []string{"-o", "addr", "show"}
	if dev != "" {
		if err := checkIfName(dev); err != nil {
			return nil, err
		}
		args = append(args, "dev", dev)
	}
	r, err := l.ip(args...)
	if err != nil {
		if dev != "" && strings.Contains(err.Error(), "does not exist") {
			return nil, fmt.Errorf("interface %s: %w (%v)", dev, ipvs.ErrNotFound, err)
		}
		return nil, err
	}
	return parseIPAddrShow(r.stdout)
}

// parseIPAddrShow reads the addresses of `ip -o addr show` lines ("2: eth0    inet
// 192.168.77.1/24 brd ... scope global eth0\ ...").
func parseIPAddrShow(out []byte) ([]netip.Addr, error) {
	var addrs []netip.Addr
	for i, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 4 || (f[2] != "inet" && f[2] != "inet6") {
			continue // a link line, or a family this adapter does not read
		}
		p, err := netip.ParsePrefix(f[3])
		if err != nil {
			return nil, fmt.Errorf("ip -o addr show: line %d: address %q: %w", i+1, f[3], err)
		}
		addrs = append(addrs, p.Addr())
	}
	return addrs, nil
}

// BindAddress implements ipvs.Netlink.
func (l *IPVSNetlink) BindAddress(dev string, addr netip.Addr) error {
	if err := checkIfName(dev); err != nil {
		return err
	}
	if !addr.IsValid() {
		return errors.New("ipvs netlink: bind: no address")
	}
	addr = addr.Unmap()
	_, err := l.ip("addr", "add", netip.PrefixFrom(addr, addr.BitLen()).String(), "dev", dev)
	if err != nil && strings.Contains(err.Error(), "File exists") {
		return nil
	}
	return err
}

// UnbindAddress implements ipvs.Netlink. An address that is not there is an error
// matching ipvs.ErrNotFound.
func (l *IPVSNetlink) UnbindAddress(dev string, addr netip.Addr) error {
	if err := checkIfName(dev); err != nil {
		return err
	}
	if !addr.IsValid() {
		return errors.New("ipvs netlink: unbind: no address")
	}
	addr = addr.Unmap()
	_, err := l.ip("addr", "del", netip.PrefixFrom(addr, addr.BitLen()).String(), "dev", dev)
	if err != nil && strings.Contains(err.Error(), "Cannot assign requested address") {
		return fmt.Errorf("address %s on %s: %w (%v)", addr, dev, ipvs.ErrNotFound, err)
	}
	return err
}

// checkIfName refuses what is not an interface name (IFNAMSIZ 16 with the NUL; no
// slash, space or colon), before it reaches a command line.
func checkIfName(name string) error {
	if name == "" || len(name) > 15 || strings.ContainsAny(name, "/ \t\n:") {
		return fmt.Errorf("ipvs netlink: interface name %q: want 1-15 characters without '/', ':' or spaces", name)
	}
	return nil
}

// NetnsSysctl is proxy/ipvs.Sysctl for a harness namespace: each write goes to
// /proc/sys/NAME from a thread inside the namespace (where /proc/sys/net shows that
// namespace's values: net.ipv4.vs.* and net.ipv4.conf.* are per namespace) and is read
// back. A sysctl the kernel does not have (net/ipv4/vs/* without ip_vs loaded) is an
// error naming it.
type NetnsSysctl struct {
	ns *Netns
}

var _ ipvs.Sysctl = (*NetnsSysctl)(nil)

// IPVSSysctl returns the sysctl writer for a namespace of the harness.
func (h *Harness) IPVSSysctl(ns *Netns) *NetnsSysctl { return &NetnsSysctl{ns: ns} }

// SetSysctl implements ipvs.Sysctl; name is a /proc/sys path ("net/ipv4/vs/conntrack").
func (s *NetnsSysctl) SetSysctl(name string, value int) error {
	key := strings.ReplaceAll(name, "/", ".")
	if strings.Contains(name, ".") {
		return fmt.Errorf("sysctl %q: want a /proc/sys path (net/ipv4/vs/conntrack)", name)
	}
	err := writeSysctls(s.ns, map[string]string{key: strconv.Itoa(value)})
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sysctl %s: the kernel does not have it in %s: %w", name, s.ns, err)
	}
	return err
}

// IPVSWriters are the writers kube-proxy's IPVS mode needs on a harness node, around v
// (the kernel's IPVS in the node's namespace, NewIPVS(n.Netns.Name); or, where the
// kernel has none, the userspace model, to check the rest on a real kernel): the ipsets
// through `ipset restore` in the namespace (proxy/ipvs.ExecIPSets), the node's IPTables
// and Conntrack, the dummy interface (IPVSNetlink) and the sysctls (NetnsSysctl).
func (h *Harness) IPVSWriters(n *Node, v ipvs.Interface) ipvs.Writers {
	return ipvs.Writers{IPVS: v, IPSets: &ipvs.ExecIPSets{Netns: n.Netns.Name}, IPTables: n.IPTables,
		Netlink: &IPVSNetlink{netns: n.Netns.Name, run: h.run}, Conntrack: n.Conntrack, Sysctl: h.IPVSSysctl(n.Netns)}
}
