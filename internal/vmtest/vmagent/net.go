//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// A case's network: IPVS runs in the director namespace, where the virtual addresses
// sit on a dummy interface (as kube-proxy's kube-ipvs0); clients connect from their own
// namespace and real servers listen in a third, each linked to the director by a veth
// pair with a /30 of link addresses. The director routes every client and real-server
// address (/32s on the far ends) and forwards, so a real server's reply comes back
// through IPVS to be un-NATed.
//
//	client ns                 director ns (IPVS)                 servers ns
//	eth0 169.254.1.2/30 ─── to-cli 169.254.1.1/30                 eth0 169.254.2.2/30
//	 + client /32s            ipvs0: the VIPs /32   to-srv 169.254.2.1/30 ─── + real server /32s
//	 default via .1.1         routes to both sides, ip_forward=1   default via .2.1

var (
	dirCli = netip.MustParsePrefix("169.254.1.1/30")
	cliDir = netip.MustParsePrefix("169.254.1.2/30")
	dirSrv = netip.MustParsePrefix("169.254.2.1/30")
	srvDir = netip.MustParsePrefix("169.254.2.2/30")
)

type topology struct {
	clients, vips, servers []netip.Addr
}

type caseNet struct {
	names          []string // named namespaces, deleted by close
	dir, cli, srv  netns.NsHandle
	dirName        string
	hDir, hCli, hS *netlink.Handle
}

// inNS runs f on a thread switched into ns; sockets f creates stay in ns.
func inNS(ns netns.NsHandle, f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		// The thread is left in ns: keep it locked so that it dies with the goroutine.
		return errors.Join(ferr, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

func newNamed(name string) (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, err
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if serr := netns.Set(orig); serr != nil {
		panic("cannot return to the agent's namespace: " + serr.Error())
	}
	return ns, err
}

func (n *caseNet) close() error {
	var errs []error
	for _, h := range []*netlink.Handle{n.hDir, n.hCli, n.hS} {
		if h != nil {
			h.Close()
		}
	}
	for _, ns := range []netns.NsHandle{n.dir, n.cli, n.srv} {
		if ns > 0 {
			ns.Close()
		}
	}
	for _, name := range n.names {
		if err := netns.DeleteNamed(name); err != nil {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// newDirector makes only the director namespace (for adapter calls), with lo up as on
// any host: in a namespace without a single IPv4 route the kernel takes every IPv4
// address for a broadcast one (inet_addr_type finds no local table) and refuses it as a
// real server with EINVAL.
func newDirector(name string) (*caseNet, error) {
	n := &caseNet{dirName: name}
	var err error
	if n.dir, err = newNamed(name); err != nil {
		return nil, err
	}
	n.names = append(n.names, name)
	if n.hDir, err = netlink.NewHandleAt(n.dir, unix.NETLINK_ROUTE); err != nil {
		n.close()
		return nil, err
	}
	lo, err := n.hDir.LinkByName("lo")
	if err == nil {
		err = n.hDir.LinkSetUp(lo)
	}
	if err != nil {
		n.close()
		return nil, fmt.Errorf("lo up: %w", err)
	}
	return n, nil
}

func buildNet(idx int, topo topology) (n *caseNet, err error) {
	n = &caseNet{dirName: fmt.Sprintf("dir%d", idx)}
	defer func() {
		if err != nil {
			_ = n.close()
			n = nil
		}
	}()
	for _, x := range []struct {
		h    *netns.NsHandle
		name string
	}{{&n.dir, n.dirName}, {&n.cli, fmt.Sprintf("cli%d", idx)}, {&n.srv, fmt.Sprintf("srv%d", idx)}} {
		if *x.h, err = newNamed(x.name); err != nil {
			return n, fmt.Errorf("namespace %s: %w", x.name, err)
		}
		n.names = append(n.names, x.name)
	}
	// Route netlink only: the library's default families include XFRM, whose module
	// the guest does not load.
	for _, x := range []struct {
		h  **netlink.Handle
		ns netns.NsHandle
	}{{&n.hDir, n.dir}, {&n.hCli, n.cli}, {&n.hS, n.srv}} {
		if *x.h, err = netlink.NewHandleAt(x.ns, unix.NETLINK_ROUTE); err != nil {
			return n, fmt.Errorf("netlink handle: %w", err)
		}
	}
	for _, h := range []*netlink.Handle{n.hDir, n.hCli, n.hS} {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return n, fmt.Errorf("lo: %w", err)
		}
		if err := h.LinkSetUp(lo); err != nil {
			return n, fmt.Errorf("lo up: %w", err)
		}
	}
	if err := n.link("to-cli", n.cli, n.hCli, dirCli, cliDir, topo.clients); err != nil {
		return n, err
	}
	if err := n.link("to-srv", n.srv, n.hS, dirSrv, srvDir, topo.servers); err != nil {
		return n, err
	}
	dummy := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "ipvs0"}}
	if err := n.hDir.LinkAdd(dummy); err != nil {
		return n, fmt.Errorf("dummy ipvs0: %w", err)
	}
	for _, v := range topo.vips {
		if err := n.hDir.AddrAdd(dummy, &netlink.Addr{IPNet: hostNet(v)}); err != nil {
			return n, fmt.Errorf("VIP %s: %w", v, err)
		}
	}
	if err := n.hDir.LinkSetUp(dummy); err != nil {
		return n, err
	}
	if err := n.sysctl(n.dir, "net/ipv4/ip_forward", "1"); err != nil {
		return n, err
	}
	// A client port whose last connection the client closed (TIME_WAIT) may be used
	// again once a second has passed (the reused-tuple cases).
	if err := n.sysctl(n.cli, "net/ipv4/tcp_tw_reuse", "1"); err != nil {
		return n, err
	}
	return n, nil
}

// link makes the veth pair director:name <-> far:eth0 with the link addresses, puts the
// /32s on the far end, routes them from the director and points the far end's default
// route at the director.
func (n *caseNet) link(name string, far netns.NsHandle, hFar *netlink.Handle, near, farAddr netip.Prefix, hosts []netip.Addr) error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(far))}
	if err := n.hDir.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s: %w", name, err)
	}
	l, err := n.hDir.LinkByName(name)
	if err != nil {
		return err
	}
	if err := n.hDir.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(near)}); err != nil {
		return err
	}
	if err := n.hDir.LinkSetUp(l); err != nil {
		return err
	}
	fl, err := hFar.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := hFar.AddrAdd(fl, &netlink.Addr{IPNet: prefixNet(farAddr)}); err != nil {
		return err
	}
	for _, h := range hosts {
		if err := hFar.AddrAdd(fl, &netlink.Addr{IPNet: hostNet(h)}); err != nil {
			return fmt.Errorf("address %s: %w", h, err)
		}
	}
	if err := hFar.LinkSetUp(fl); err != nil {
		return err
	}
	if err := hFar.RouteAdd(&netlink.Route{Gw: net.IP(near.Addr().AsSlice())}); err != nil {
		return fmt.Errorf("default route via %s: %w", near.Addr(), err)
	}
	for _, h := range hosts {
		if err := n.hDir.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: hostNet(h), Gw: net.IP(farAddr.Addr().AsSlice())}); err != nil {
			return fmt.Errorf("route to %s: %w", h, err)
		}
	}
	return nil
}

func (n *caseNet) sysctl(ns netns.NsHandle, key, val string) error {
	return inNS(ns, func() error {
		if err := os.WriteFile("/proc/sys/"+key, []byte(val), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", key, val, err)
		}
		return nil
	})
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func hostNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}
