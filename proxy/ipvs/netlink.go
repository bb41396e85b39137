package ipvs

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
)

// This file holds the small interfaces the kube-proxy IPVS mode writes through besides
// Interface: the ipsets, the dummy interface its VIPs are bound to, and the sysctls.

// IPSets is how the IPVS mode programs ipsets: `ipset restore` input in, `ipset save`
// output back. Implementations: the iptables emulator (package
// proxy/iptables/emulator; one object holds a node's rules and sets, as a network
// namespace does) and, on a real host, the ipset tool (ExecIPSets).
type IPSets interface {
	// RestoreIPSets applies `ipset restore` input (create, add, del, flush, destroy
	// lines, with -exist).
	RestoreIPSets(ctx context.Context, data []byte) error
	// SaveIPSets returns `ipset save` output for every set.
	SaveIPSets(ctx context.Context) ([]byte, error)
}

// Netlink is the part of the node's network configuration the IPVS mode changes: the
// dummy interface (kube-ipvs0) holding every virtual address, so that the kernel
// delivers packets for them locally, where IPVS hooks in. Implementations: a netsim
// node (package proxy/kubeproxy), FakeNetlink, and on a real host iproute2/netlink.
type Netlink interface {
	// EnsureDummyDevice creates the dummy interface if it does not exist and reports
	// whether it existed.
	EnsureDummyDevice(name string) (existed bool, err error)
	// LocalAddresses returns the addresses assigned to the interface dev, or to every
	// interface of the node (loopback included) when dev is "".
	LocalAddresses(dev string) ([]netip.Addr, error)
	// BindAddress assigns addr (as a host route: /32 or /128) to dev; an address
	// already there is not an error.
	BindAddress(dev string, addr netip.Addr) error
	// UnbindAddress removes addr from dev.
	UnbindAddress(dev string, addr netip.Addr) error
}

// Sysctl sets kernel parameters by their /proc/sys path ("net/ipv4/vs/conntrack").
type Sysctl interface {
	SetSysctl(name string, value int) error
}

// FakeNetlink is a state-based Netlink: interfaces and their addresses in memory.
// It is safe for concurrent use.
type FakeNetlink struct {
	mu     sync.Mutex
	ifaces map[string][]netip.Addr
	order  []string
}

var _ Netlink = (*FakeNetlink)(nil)

// NewFakeNetlink returns a node with the loopback interface (127.0.0.1, ::1) and no
// other.
func NewFakeNetlink() *FakeNetlink {
	f := &FakeNetlink{ifaces: map[string][]netip.Addr{}}
	f.SetAddresses("lo", netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback())
	return f
}

// SetAddresses creates the interface dev if needed and replaces its addresses.
func (f *FakeNetlink) SetAddresses(dev string, addrs ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.ifaces[dev]; !ok {
		f.order = append(f.order, dev)
	}
	f.ifaces[dev] = slices.Clone(addrs)
}

// EnsureDummyDevice implements Netlink.
func (f *FakeNetlink) EnsureDummyDevice(name string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.ifaces[name]; ok {
		return true, nil
	}
	f.ifaces[name] = nil
	f.order = append(f.order, name)
	return false, nil
}

// LocalAddresses implements Netlink.
func (f *FakeNetlink) LocalAddresses(dev string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if dev != "" {
		addrs, ok := f.ifaces[dev]
		if !ok {
			return nil, fmt.Errorf("interface %s: %w", dev, ErrNotFound)
		}
		return slices.Clone(addrs), nil
	}
	var out []netip.Addr
	for _, d := range f.order {
		out = append(out, f.ifaces[d]...)
	}
	return out, nil
}

// BindAddress implements Netlink.
func (f *FakeNetlink) BindAddress(dev string, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	addrs, ok := f.ifaces[dev]
	if !ok {
		return fmt.Errorf("interface %s: %w", dev, ErrNotFound)
	}
	if !slices.Contains(addrs, addr) {
		f.ifaces[dev] = append(addrs, addr)
	}
	return nil
}

// UnbindAddress implements Netlink.
func (f *FakeNetlink) UnbindAddress(dev string, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	addrs, ok := f.ifaces[dev]
	if !ok {
		return fmt.Errorf("interface %s: %w", dev, ErrNotFound)
	}
	i := slices.Index(addrs, addr)
	if i < 0 {
		return fmt.Errorf("address %s on %s: %w", addr, dev, ErrNotFound)
	}
	f.ifaces[dev] = slices.Delete(addrs, i, i+1)
	return nil
}

// FakeSysctl records sysctl writes.
type FakeSysctl struct {
	mu     sync.Mutex
	Values map[string]int
	Writes []string // "name=value", in order
}

// SetSysctl implements Sysctl.
func (f *FakeSysctl) SetSysctl(name string, value int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Values == nil {
		f.Values = map[string]int{}
	}
	f.Values[name] = value
	f.Writes = append(f.Writes, fmt.Sprintf("%s=%d", name, value))
	return nil
}
