//go:build linux

package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	libipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink"

	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// IPVS is the kernel implementation of proxy/ipvs.Interface: virtual servers programmed
// over generic netlink with github.com/moby/ipvs (what kube-proxy and Docker use),
// optionally inside a named network namespace. It translates between our VirtualServer
// and RealServer and the library's Service and Destination.
type IPVS struct {
	h     *libipvs.Handle
	netns string
}

var _ ipvs.Interface = (*IPVS)(nil)

// CheckIPVS reports whether the kernel can do IPVS by resolving the "IPVS"
// generic-netlink family (CTRL_CMD_GETFAMILY). Generic-netlink families are
// kernel-wide, so the answer holds for every namespace. A missing family gives an
// *IPVSUnsupportedError (matching ErrIPVSUnsupported) wrapping the netlink error (ENOENT). moby/ipvs's own New
// cannot be trusted for this: on a kernel without IPVS it logs a warning and returns a
// handle whose calls go to family 0.
func CheckIPVS() error {
	_, err := netlink.GenlFamilyGet("IPVS")
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.ENOENT) {
		return &IPVSUnsupportedError{Reason: "generic netlink family \"IPVS\" not found (kernel built without CONFIG_IP_VS, or ip_vs not loaded)", Err: err}
	}
	return fmt.Errorf("ipvs: resolving generic netlink family \"IPVS\": %w", err)
}

// NewIPVS checks for kernel IPVS support (see CheckIPVS) and opens a generic-netlink
// handle in the named network namespace (HostNamespace for the caller's own; "" is an
// error, ErrNoNamespace). Without IPVS it returns an error wrapping
// ErrIPVSUnsupported; it never falls back to anything.
func NewIPVS(netns string) (*IPVS, error) {
	if err := checkNetns("ipvs", netns); err != nil {
		return nil, err
	}
	if err := CheckIPVS(); err != nil {
		return nil, err
	}
	path := ""
	if !isHost(netns) {
		path = filepath.Join(netnsDir, netns)
	}
	h, err := libipvs.New(path)
	if err != nil {
		return nil, fmt.Errorf("ipvs: open netlink handle (netns %q): %w", netns, err)
	}
	return &IPVS{h: h, netns: netns}, nil
}

// Close releases the netlink socket.
func (v *IPVS) Close() { v.h.Close() }

// Flush deletes every virtual server.
func (v *IPVS) Flush() error { return wrapIPVS("flush", v.h.Flush()) }

// AddVirtualServer creates a virtual server.
func (v *IPVS) AddVirtualServer(vs *ipvs.VirtualServer) error {
	s, err := toLibService(vs)
	if err != nil {
		return err
	}
	return wrapIPVS("add virtual server "+vsString(vs), v.h.NewService(s))
}

// UpdateVirtualServer changes a virtual server's scheduler, flags and persistence.
func (v *IPVS) UpdateVirtualServer(vs *ipvs.VirtualServer) error {
	s, err := toLibService(vs)
	if err != nil {
		return err
	}
	return wrapIPVS("update virtual server "+vsString(vs), v.h.UpdateService(s))
}

// DeleteVirtualServer deletes a virtual server and its real servers.
func (v *IPVS) DeleteVirtualServer(vs *ipvs.VirtualServer) error {
	s, err := toLibService(vs)
	if err != nil {
		return err
	}
	return wrapIPVS("delete virtual server "+vsString(vs), v.h.DelService(s))
}

// GetVirtualServer returns the kernel's view of one virtual server.
func (v *IPVS) GetVirtualServer(vs *ipvs.VirtualServer) (*ipvs.VirtualServer, error) {
	s, err := toLibService(vs)
	if err != nil {
		return nil, err
	}
	got, err := v.h.GetService(s)
	if err != nil {
		return nil, wrapIPVS("get virtual server "+vsString(vs), err)
	}
	return fromLibService(got)
}

// GetVirtualServers lists every virtual server.
func (v *IPVS) GetVirtualServers() ([]*ipvs.VirtualServer, error) {
	svcs, err := v.h.GetServices()
	if err != nil {
		return nil, wrapIPVS("list virtual servers", err)
	}
	out := make([]*ipvs.VirtualServer, 0, len(svcs))
	for _, s := range svcs {
		vs, err := fromLibService(s)
		if err != nil {
			return nil, err
		}
		out = append(out, vs)
	}
	return out, nil
}

// AddRealServer adds a destination to a virtual server.
func (v *IPVS) AddRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	s, d, err := toLibPair(vs, rs)
	if err != nil {
		return err
	}
	return wrapIPVS("add real server "+rsString(rs)+" to "+vsString(vs), v.h.NewDestination(s, d))
}

// GetRealServers lists a virtual server's destinations with their counters.
func (v *IPVS) GetRealServers(vs *ipvs.VirtualServer) ([]*ipvs.RealServer, error) {
	s, err := toLibService(vs)
	if err != nil {
		return nil, err
	}
	dsts, err := v.h.GetDestinations(s)
	if err != nil {
		return nil, wrapIPVS("list real servers of "+vsString(vs), err)
	}
	out := make([]*ipvs.RealServer, 0, len(dsts))
	for _, d := range dsts {
		rs, err := fromLibDestination(d)
		if err != nil {
			return nil, err
		}
		out = append(out, rs)
	}
	return out, nil
}

// DeleteRealServer removes a destination.
func (v *IPVS) DeleteRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	s, d, err := toLibPair(vs, rs)
	if err != nil {
		return err
	}
	return wrapIPVS("delete real server "+rsString(rs)+" of "+vsString(vs), v.h.DelDestination(s, d))
}

// UpdateRealServer changes a destination's weight, forwarding method and thresholds.
func (v *IPVS) UpdateRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	s, d, err := toLibPair(vs, rs)
	if err != nil {
		return err
	}
	return wrapIPVS("update real server "+rsString(rs)+" of "+vsString(vs), v.h.UpdateDestination(s, d))
}

// ConfigureTimeouts sets the IPVS connection timeouts (ipvsadm --set); zero leaves one
// unchanged, as in the kernel.
func (v *IPVS) ConfigureTimeouts(tcp, tcpFin, udp time.Duration) error {
	return wrapIPVS("configure timeouts", v.h.SetConfig(&libipvs.Config{TimeoutTCP: tcp, TimeoutTCPFin: tcpFin, TimeoutUDP: udp}))
}

// wrapIPVS names the operation and, for the kernel's errnos, matches the ipvs package's
// error values too (errors.Is(err, ipvs.ErrNotFound) as well as syscall.ESRCH), as the
// emulator's errors do, so callers such as the proxier (ipvs.IsNotFound) decide the
// same way on a kernel as on the model: EEXIST is ErrExist; ESRCH (no such virtual
// service) and ENOENT (no such real server, no such scheduler module) are ErrNotFound;
// EINVAL is ErrInvalid and ERANGE ErrRange.
func wrapIPVS(what string, err error) error {
	if err == nil {
		return nil
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if kind := errnoKinds[errno]; kind != nil {
			return &ipvsErrnoError{what: what, errno: errno, kind: kind}
		}
	}
	return fmt.Errorf("ipvs: %s: %w", what, err)
}

var errnoKinds = map[syscall.Errno]error{
	syscall.EEXIST: ipvs.ErrExist,
	syscall.ESRCH:  ipvs.ErrNotFound,
	syscall.ENOENT: ipvs.ErrNotFound,
	syscall.EINVAL: ipvs.ErrInvalid,
	syscall.ERANGE: ipvs.ErrRange,
}

// ipvsErrnoError is a kernel errno with the ipvs package's name for it.
type ipvsErrnoError struct {
	what  string
	errno syscall.Errno
	kind  error
}

func (e *ipvsErrnoError) Error() string { return "ipvs: " + e.what + ": " + e.errno.Error() }

// Unwrap gives both the errno and the ipvs package's error.
func (e *ipvsErrnoError) Unwrap() []error { return []error{e.errno, e.kind} }

func vsString(vs *ipvs.VirtualServer) string {
	if vs == nil {
		return "<nil>"
	}
	if vs.FWMark != 0 {
		return fmt.Sprintf("fwmark %d", vs.FWMark)
	}
	return fmt.Sprintf("%s %s", vs.Protocol, netip.AddrPortFrom(vs.Address, vs.Port))
}

func rsString(rs *ipvs.RealServer) string {
	if rs == nil {
		return "<nil>"
	}
	return netip.AddrPortFrom(rs.Address, rs.Port).String()
}

// protocolNumbers maps VirtualServer.Protocol to IP protocol numbers.
var protocolNumbers = map[string]uint16{"TCP": syscall.IPPROTO_TCP, "UDP": syscall.IPPROTO_UDP, "SCTP": 132}

func familyOf(a netip.Addr) uint16 {
	if a.Unmap().Is4() {
		return syscall.AF_INET
	}
	return syscall.AF_INET6
}

func toNetIP(a netip.Addr) net.IP {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return net.IP(b[:])
	}
	b := a.As16()
	return net.IP(b[:])
}

func fromNetIP(ip net.IP) (netip.Addr, bool) {
	if ip == nil {
		return netip.Addr{}, false
	}
	if ip4 := ip.To4(); ip4 != nil {
		return netip.AddrFrom4([4]byte(ip4)), true
	}
	a, ok := netip.AddrFromSlice(ip)
	return a, ok
}

// v4Netmask turns a prefix length into the IPv4 netmask attribute: the kernel reads
// IPVS_SVC_ATTR_NETMASK as a big-endian mask for IPv4 (a prefix length for IPv6), and
// the library writes the uint32 in host order, so the value is the mask's bytes read in
// host order.
func v4Netmask(bitsLen uint32) uint32 {
	if bitsLen > 32 {
		bitsLen = 32
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], ^uint32(0)<<(32-bitsLen))
	if bitsLen == 0 {
		b = [4]byte{}
	}
	return binary.NativeEndian.Uint32(b[:])
}

func v4NetmaskBits(attr uint32) uint32 {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], attr)
	return uint32(bits.OnesCount32(binary.BigEndian.Uint32(b[:])))
}

func toLibService(vs *ipvs.VirtualServer) (*libipvs.Service, error) {
	if vs == nil {
		return nil, errors.New("ipvs: nil virtual server")
	}
	s := &libipvs.Service{
		SchedName: vs.Scheduler,
		Flags:     uint32(vs.Flags),
		Timeout:   vs.Timeout,
	}
	if vs.FWMark != 0 {
		s.FWMark = vs.FWMark
		s.AddressFamily = syscall.AF_INET
		if vs.Address.IsValid() {
			s.AddressFamily = familyOf(vs.Address)
		}
	} else {
		if !vs.Address.IsValid() {
			return nil, fmt.Errorf("ipvs: virtual server %s: no address and no fwmark", vsString(vs))
		}
		proto, ok := protocolNumbers[strings.ToUpper(vs.Protocol)]
		if !ok {
			return nil, fmt.Errorf("ipvs: virtual server %s: unknown protocol %q (want TCP, UDP or SCTP)", vsString(vs), vs.Protocol)
		}
		s.Address = toNetIP(vs.Address)
		s.Protocol = proto
		s.Port = vs.Port
		s.AddressFamily = familyOf(vs.Address)
	}
	netmask := vs.Netmask
	if s.AddressFamily == syscall.AF_INET {
		if netmask == 0 {
			netmask = 32
		}
		s.Netmask = v4Netmask(netmask)
	} else {
		if netmask == 0 {
			netmask = 128
		}
		s.Netmask = netmask
	}
	return s, nil
}

func fromLibService(s *libipvs.Service) (*ipvs.VirtualServer, error) {
	vs := &ipvs.VirtualServer{
		Port:      s.Port,
		FWMark:    s.FWMark,
		Scheduler: s.SchedName,
		Flags:     ipvs.ServiceFlags(s.Flags),
		Timeout:   s.Timeout,
	}
	if s.FWMark == 0 {
		a, ok := fromNetIP(s.Address)
		if !ok {
			return nil, fmt.Errorf("ipvs: kernel returned a service with bad address %v", s.Address)
		}
		vs.Address = a
		switch s.Protocol {
		case syscall.IPPROTO_TCP:
			vs.Protocol = "TCP"
		case syscall.IPPROTO_UDP:
			vs.Protocol = "UDP"
		case 132:
			vs.Protocol = "SCTP"
		default:
			return nil, fmt.Errorf("ipvs: kernel returned service %v with unknown protocol %d", a, s.Protocol)
		}
	}
	if s.AddressFamily == syscall.AF_INET {
		vs.Netmask = v4NetmaskBits(s.Netmask)
	} else {
		vs.Netmask = s.Netmask
	}
	return vs, nil
}

// forwardMask is IP_VS_CONN_F_FWD_MASK: the forwarding method's bits in the
// destination's connection flags.
const forwardMask = 0x7

func toLibPair(vs *ipvs.VirtualServer, rs *ipvs.RealServer) (*libipvs.Service, *libipvs.Destination, error) {
	s, err := toLibService(vs)
	if err != nil {
		return nil, nil, err
	}
	if rs == nil || !rs.Address.IsValid() {
		return nil, nil, fmt.Errorf("ipvs: real server of %s: no address", vsString(vs))
	}
	if rs.Forward > forwardMask {
		return nil, nil, fmt.Errorf("ipvs: real server %s: bad forwarding method %d", rsString(rs), rs.Forward)
	}
	d := &libipvs.Destination{
		Address:         toNetIP(rs.Address),
		Port:            rs.Port,
		Weight:          rs.Weight,
		ConnectionFlags: uint32(rs.Forward),
		AddressFamily:   familyOf(rs.Address),
		UpperThreshold:  rs.UpperThreshold,
		LowerThreshold:  rs.LowerThreshold,
	}
	return s, d, nil
}

func fromLibDestination(d *libipvs.Destination) (*ipvs.RealServer, error) {
	a, ok := fromNetIP(d.Address)
	if !ok {
		return nil, fmt.Errorf("ipvs: kernel returned a destination with bad address %v", d.Address)
	}
	return &ipvs.RealServer{
		Address:        a,
		Port:           d.Port,
		Weight:         d.Weight,
		Forward:        ipvs.ForwardMethod(d.ConnectionFlags & forwardMask),
		UpperThreshold: d.UpperThreshold,
		LowerThreshold: d.LowerThreshold,
		ActiveConn:     d.ActiveConnections,
		InactiveConn:   d.InactiveConnections,
		// moby/ipvs v1.1.0 does not report persistent connections; PersistConn stays 0.
	}, nil
}
