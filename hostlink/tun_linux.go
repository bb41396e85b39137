//go:build linux

package hostlink

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/scenario"
)

// TUN is a TUN device bridged into the cluster as an external host: the host kernel
// keeps its own TCP; packets the kernel routes into the device enter the cluster
// network as the host's, and what the network delivers to the host is written back.
// The device is not persistent: it and its routes vanish when the process ends, even
// by a crash; Close removes them at once.
type TUN struct {
	name   string
	f      *os.File
	nl     *netlink.Handle
	host   *netsim.ExternalHost
	routes []netip.Prefix
	opened []string
	wg     sync.WaitGroup
	closed atomic.Bool
	// Dropped counts packets from the device the cluster could not take (not IP, or of
	// a family the host has no address of).
	Dropped atomic.Uint64
}

// OpenTUN makes the TUN device, checks and installs its routes, and bridges it into the
// cluster as an external host named as the device (external:clab0). logf hears of a stale device removed. It needs
// CAP_NET_ADMIN.
func OpenTUN(live *scenario.Live, cfg TUNConfig, logf func(string, ...any)) (t *TUN, err error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	name := cfg.Name
	if name == "" {
		name = DefaultTUNName
	}
	if len(name) >= unix.IFNAMSIZ || name == "." || name == ".." {
		return nil, fmt.Errorf("TUN name %q: want at most %d characters", name, unix.IFNAMSIZ-1)
	}
	t = &TUN{name: name}
	var ns netns.NsHandle = -1
	if cfg.Netns != "" {
		if ns, err = netns.GetFromName(cfg.Netns); err != nil {
			return nil, fmt.Errorf("network namespace %s: %w", cfg.Netns, err)
		}
		defer ns.Close()
		t.nl, err = netlink.NewHandleAt(ns)
	} else {
		t.nl, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer func() {
		if err != nil {
			t.Close()
			t = nil
		}
	}()
	if err := t.removeStale(logf); err != nil {
		return nil, err
	}
	c := live.Cluster()
	routes := cfg.Routes
	if len(routes) == 0 {
		var nodeIPs []netip.Addr
		var pods []netip.Prefix
		for _, n := range c.Nodes() {
			nodeIPs = append(nodeIPs, n.IPs()...)
			pods = append(pods, n.PodCIDRs()...)
		}
		routes = defaultRoutes(c.Config().ServiceCIDRs, pods, nodeIPs)
	}
	host, err := t.hostRoutes()
	if err != nil {
		return nil, err
	}
	if ov := overlaps(routes, host, name); len(ov) > 0 && !cfg.Force {
		return nil, fmt.Errorf("routes overlap the host's (--force installs them anyway): %s", joinLines(ov))
	}
	if err := t.create(ns, cfg.Netns != ""); err != nil {
		return nil, err
	}
	if t.host, err = live.AddHost(scenario.HostConfig{Name: name, Via: cfg.Via, Deliver: t.deliver}); err != nil {
		return nil, fmt.Errorf("adding the host %s: %w", name, err)
	}
	mtu := c.Config().MTU
	if mtu == 0 {
		mtu = 1500
	}
	if err := t.configure(routes, mtu); err != nil {
		return nil, err
	}
	t.wg.Add(1)
	go t.read()
	rs := make([]string, len(t.routes))
	for i, r := range t.routes {
		rs[i] = r.String()
	}
	t.opened = append(t.opened, fmt.Sprintf("TUN device %s, address %s (external:%s), routes %s: curl http://CLUSTER-IP:PORT/ and NODE-IP:NODE-PORT work from this machine", name, t.host.IP(), name, joinComma(rs)))
	if mode, server := live.DNS(); mode == "kube-dns" {
		t.opened = append(t.opened, fmt.Sprintf("cluster DNS through the TUN: resolv.conf: nameserver %s + search default.svc.cluster.local svc.cluster.local cluster.local; or resolvectl dns %s %s && resolvectl domain %s ~cluster.local", server, name, server, name))
	}
	return t, nil
}

// Opened describes the device, a line each.
func (t *TUN) Opened() []string { return append([]string(nil), t.opened...) }

// Name is the device's name.
func (t *TUN) Name() string { return t.name }

// Host is the external host the device is in the cluster.
func (t *TUN) Host() *netsim.ExternalHost { return t.host }

// removeStale deletes a device of our name left by an earlier run (made persistent by
// someone, or not yet gone); a device of that name that is not ours is an error.
func (t *TUN) removeStale(logf func(string, ...any)) error {
	l, err := t.nl.LinkByName(t.name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("looking for a device %s: %w", t.name, err)
	}
	if l.Attrs().Alias != tunAlias {
		return fmt.Errorf("a device %s exists and is not clusterlab up's (its alias is %q, not %q): choose another name with --tun-name", t.name, l.Attrs().Alias, tunAlias)
	}
	if err := t.nl.LinkDel(l); err != nil {
		return fmt.Errorf("removing the stale device %s: %w", t.name, err)
	}
	logf("removed the stale device %s (alias %s) that an earlier clusterlab up left", t.name, tunAlias)
	return nil
}

// hostRoutes lists the main table's routes.
func (t *TUN) hostRoutes() ([]hostRoute, error) {
	rs, err := t.nl.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing the host's routes: %w", err)
	}
	var out []hostRoute
	for _, r := range rs {
		hr := hostRoute{}
		if r.Dst != nil {
			a, _ := netip.AddrFromSlice(r.Dst.IP)
			ones, _ := r.Dst.Mask.Size()
			hr.dst = netip.PrefixFrom(a.Unmap(), ones)
		} else if r.Family == netlink.FAMILY_V6 {
			hr.dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		} else {
			hr.dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		}
		if l, err := t.nl.LinkByIndex(r.LinkIndex); err == nil {
			hr.dev = l.Attrs().Name
		}
		out = append(out, hr)
	}
	return out, nil
}

// create opens /dev/net/tun and makes the device (in the namespace ns when inNs).
func (t *TUN) create(ns netns.NsHandle, inNs bool) error {
	mk := func() (int, error) {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(t.name)
		if err != nil {
			unix.Close(fd)
			return -1, err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("creating the TUN device %s: %w", t.name, err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return -1, err
		}
		return fd, nil
	}
	var fd int
	var err error
	if inNs {
		// On a thread of its own that joins the namespace and is never given back to
		// the runtime (it exits locked), as package kernel does.
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			if err = netns.Set(ns); err != nil {
				err = fmt.Errorf("setns: %w", err)
				return
			}
			fd, err = mk()
		}()
		<-done
	} else {
		fd, err = mk()
	}
	if err != nil {
		return err
	}
	t.f = os.NewFile(uintptr(fd), "/dev/net/tun")
	return nil
}

// configure names the device ours, gives it the host's address and MTU, brings it up
// and adds the routes (those of a family the host has an address of).
func (t *TUN) configure(routes []netip.Prefix, mtu int) error {
	l, err := t.nl.LinkByName(t.name)
	if err != nil {
		return fmt.Errorf("device %s: %w", t.name, err)
	}
	if err := t.nl.LinkSetAlias(l, tunAlias); err != nil {
		return fmt.Errorf("device %s: alias: %w", t.name, err)
	}
	if err := t.nl.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("device %s: mtu %d: %w", t.name, mtu, err)
	}
	srcs := map[bool]netip.Addr{}
	for _, a := range t.host.IPs() {
		srcs[a.Is4()] = a
		if err := t.nl.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(a, a.BitLen()))}); err != nil {
			return fmt.Errorf("device %s: address %s: %w", t.name, a, err)
		}
	}
	if err := t.nl.LinkSetUp(l); err != nil {
		return fmt.Errorf("device %s: up: %w", t.name, err)
	}
	for _, r := range routes {
		src, ok := srcs[r.Addr().Is4()]
		if !ok {
			continue
		}
		rt := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: prefixNet(r.Masked()), Src: src.AsSlice(), Scope: netlink.SCOPE_LINK}
		if err := t.nl.RouteAdd(rt); err != nil {
			return fmt.Errorf("route %s dev %s: %w", r, t.name, err)
		}
		t.routes = append(t.routes, r.Masked())
	}
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// read carries packets from the device into the cluster until the device closes.
func (t *TUN) read() {
	defer t.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, err := t.f.Read(buf)
		if err != nil {
			return
		}
		if err := t.host.Send(buf[:n]); err != nil {
			t.Dropped.Add(1)
		}
	}
}

// deliver writes a packet the cluster sends the host into the device.
func (t *TUN) deliver(b []byte) {
	if t.closed.Load() || t.f == nil {
		return
	}
	t.f.Write(b)
}

// Close removes the device (and so its routes) and waits for its reader.
func (t *TUN) Close() {
	if t == nil || t.closed.Swap(true) {
		return
	}
	if t.f != nil {
		t.f.Close()
	}
	t.wg.Wait()
	if t.nl != nil {
		if l, err := t.nl.LinkByName(t.name); err == nil && l.Attrs().Alias == tunAlias {
			t.nl.LinkDel(l)
		}
		t.nl.Close()
	}
}

func joinLines(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += "; "
		}
		out += x
	}
	return out
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}
