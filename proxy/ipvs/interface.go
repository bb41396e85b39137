package ipvs

import (
	"errors"
	"net/netip"
	"time"
)

// Interface is how kube-proxy's IPVS mode programs virtual servers. Implementations: the
// userspace model in package proxy/ipvs/emulator (every Linux scheduler, the connection
// table) and the kernel adapter in package kernel (generic netlink). The shape follows
// kube-proxy's pkg/proxy/ipvs/util Interface.
type Interface interface {
	Flush() error
	AddVirtualServer(*VirtualServer) error
	UpdateVirtualServer(*VirtualServer) error
	DeleteVirtualServer(*VirtualServer) error
	GetVirtualServer(*VirtualServer) (*VirtualServer, error)
	GetVirtualServers() ([]*VirtualServer, error)
	AddRealServer(*VirtualServer, *RealServer) error
	GetRealServers(*VirtualServer) ([]*RealServer, error)
	DeleteRealServer(*VirtualServer, *RealServer) error
	UpdateRealServer(*VirtualServer, *RealServer) error
	ConfigureTimeouts(tcp, tcpFin, udp time.Duration) error
}

// ServiceFlags are the IP_VS_SVC_F_* flags of a virtual server.
type ServiceFlags uint32

// Virtual-server flags, values as in include/uapi/linux/ip_vs.h.
const (
	FlagPersistent ServiceFlags = 0x0001 // IP_VS_SVC_F_PERSISTENT
	FlagHashed     ServiceFlags = 0x0002 // IP_VS_SVC_F_HASHED
	FlagOnePacket  ServiceFlags = 0x0004 // IP_VS_SVC_F_ONEPACKET
	FlagSchedSH1   ServiceFlags = 0x0008 // sh-fallback / mh-fallback
	FlagSchedSH2   ServiceFlags = 0x0010 // sh-port / mh-port
	FlagSchedSH3   ServiceFlags = 0x0020
)

// VirtualServer is an IPVS virtual service: address:port/protocol, or a firewall mark.
type VirtualServer struct {
	Address   netip.Addr // invalid (zero) for fwmark services
	Protocol  string     // "TCP", "UDP" or "SCTP"; empty for fwmark services
	Port      uint16
	FWMark    uint32 // non-zero for fwmark services
	Scheduler string // rr, wrr, lc, wlc, sed, nq, dh, sh, mh, lblc, lblcr, fo, ovf, twos
	Flags     ServiceFlags
	Timeout   uint32 // persistence timeout in seconds (with FlagPersistent)
	Netmask   uint32 // persistence netmask: prefix bits for IPv4 and IPv6 alike
}

// ForwardMethod is how packets reach a real server (ipvsadm -m/-g/-i).
type ForwardMethod uint32

// Forwarding methods, values as IP_VS_CONN_F_* in include/uapi/linux/ip_vs.h.
const (
	Masquerade  ForwardMethod = 0 // -m, NAT: what kube-proxy uses
	Local       ForwardMethod = 1
	Tunnel      ForwardMethod = 2 // -i
	DirectRoute ForwardMethod = 3 // -g
)

// RealServer is a destination of a virtual server.
type RealServer struct {
	Address        netip.Addr
	Port           uint16
	Weight         int
	Forward        ForwardMethod
	UpperThreshold uint32 // -x: 0 means no limit
	LowerThreshold uint32 // -y
	ActiveConn     int    // read-only in Get*
	InactiveConn   int    // read-only in Get*
	PersistConn    int    // read-only in Get*: connection templates pointing here
	Overloaded     bool   // read-only in Get*: IP_VS_DEST_F_OVERLOAD (set by the -x/-y thresholds)
}

// Errors an Interface returns, wrapped with context; they mirror the kernel's errnos.
// The emulator (package proxy/ipvs/emulator) returns them; the proxier tells a missing
// virtual server by IsNotFound.
var (
	ErrExist    = errors.New("already exists")   // EEXIST
	ErrNotFound = errors.New("not found")        // ENOENT (also an unknown scheduler)
	ErrInvalid  = errors.New("invalid argument") // EINVAL
	ErrRange    = errors.New("out of range")     // ERANGE
)

// IsNotFound reports whether err is (or wraps) ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsExist reports whether err is (or wraps) ErrExist.
func IsExist(err error) bool { return errors.Is(err, ErrExist) }

// Schedulers lists the schedulers a VirtualServer may name: the kernel's ip_vs_*
// modules, every one of which the emulator implements.
func Schedulers() []string {
	return []string{"rr", "wrr", "lc", "wlc", "sed", "nq", "dh", "sh", "mh", "lblc", "lblcr", "fo", "ovf", "twos"}
}
