package emulator

import (
	"fmt"
	"math/bits"
	"net/netip"

	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// This file gives a parsed ipvsadm command to any ipvs.Interface, as ipvsadm gives it to
// the kernel over netlink: the kernel adapter (package kernel) runs the model's scripts
// on a real IPVS this way, so the two can be compared line by line.

// VirtualServer returns the service the command names, as ipvsadm would send it to the
// kernel (scheduler, flags, persistence timeout and netmask from the options and
// ipvsadm's defaults), or nil when the command names none (-C, --set, -L without one).
func (c *Command) VirtualServer() *ipvs.VirtualServer {
	if !c.has(optService) {
		return nil
	}
	return c.svc.virtualServer()
}

// RealServer returns the real server the command names (-a, -e, -d), or nil.
func (c *Command) RealServer() *ipvs.RealServer {
	if !c.has(optServer) {
		return nil
	}
	d := c.dest
	return &ipvs.RealServer{Address: d.addr, Port: d.port, Weight: d.weight, Forward: d.fwd,
		UpperThreshold: d.uThresh, LowerThreshold: d.lThresh}
}

// ApplyTo makes the command's change through v: -A, -E, -D, -C, -a, -e, -d and --set
// become AddVirtualServer, UpdateVirtualServer, DeleteVirtualServer, Flush,
// AddRealServer, UpdateRealServer, DeleteRealServer and ConfigureTimeouts. Listings,
// saves, -Z and the sync daemon are not changes and give an error wrapping
// ErrUnsupported; so does a tunnel real server, which ipvs.RealServer cannot describe.
func (c *Command) ApplyTo(v ipvs.Interface) error {
	switch c.Op {
	case OpAdd:
		return v.AddVirtualServer(c.VirtualServer())
	case OpEdit:
		return v.UpdateVirtualServer(c.VirtualServer())
	case OpDel:
		return v.DeleteVirtualServer(c.VirtualServer())
	case OpFlush:
		return v.Flush()
	case OpAddDest, OpEditDest, OpDelDest:
		if c.dest.fwd == ipvs.Tunnel && c.dest.tun != (tunnelInfo{}) {
			return fmt.Errorf("%s: tunnel options: %w", c.Op, ErrUnsupported)
		}
		vs, rs := c.VirtualServer(), c.RealServer()
		switch c.Op {
		case OpAddDest:
			return v.AddRealServer(vs, rs)
		case OpEditDest:
			return v.UpdateRealServer(vs, rs)
		}
		return v.DeleteRealServer(vs, rs)
	case OpSetTimeout:
		return v.ConfigureTimeouts(secs(c.timeouts[0]), secs(c.timeouts[1]), secs(c.timeouts[2]))
	}
	return fmt.Errorf("%s: not a change to apply: %w", c.Op, ErrUnsupported)
}

// virtualServer is the spec as an ipvs.VirtualServer (what service.virtualServer gives
// for a service made from it).
func (sp svcSpec) virtualServer() *ipvs.VirtualServer {
	vs := &ipvs.VirtualServer{Scheduler: sp.schedName, Flags: sp.flags, Timeout: sp.timeoutSec}
	if sp.key.fwmark != 0 {
		vs.FWMark = sp.key.fwmark
		if sp.key.v6 {
			vs.Address = netip.IPv6Unspecified()
		}
	} else {
		vs.Address = sp.key.addr
		vs.Port = sp.key.port
		vs.Protocol = protoName(sp.proto)
	}
	if sp.key.v6 {
		vs.Netmask = uint32(sp.bits6)
	} else {
		vs.Netmask = uint32(bits.LeadingZeros32(^sp.mask4))
	}
	return vs
}

// ListsConnections reports whether the command is a connection listing (ipvsadm -Lc).
func (c *Command) ListsConnections() bool { return c.Op == OpList && c.has(optConnection) }

// ListsStats reports whether the command is a traffic statistics listing (ipvsadm -L
// --stats).
func (c *Command) ListsStats() bool { return c.Op == OpList && c.has(optStats) }
