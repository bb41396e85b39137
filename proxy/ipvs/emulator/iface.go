package emulator

import (
	"fmt"
	"math/bits"
	"net/netip"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// This file implements ipvs.Interface (kube-proxy's view of IPVS) on the model.

// specFromVS converts a VirtualServer into the kernel's service description. For fwmark
// services Address may be an unspecified address (0.0.0.0 or ::) choosing the family;
// an invalid Address means IPv4. Netmask is a prefix length; 0 means the full length
// (/32 or /128), which is what kube-proxy and ipvsadm use by default.
func specFromVS(vs *ipvs.VirtualServer) (svcSpec, error) {
	if vs == nil {
		return svcSpec{}, fmt.Errorf("nil virtual server: %w", ipvs.ErrInvalid)
	}
	var sp svcSpec
	if vs.FWMark != 0 {
		v6 := vs.Address.IsValid() && vs.Address.Is6() && !vs.Address.Is4In6()
		sp.key = svcKey{fwmark: vs.FWMark, v6: v6}
		sp.proto = netfilter.ProtoTCP
		if vs.Protocol != "" {
			p, err := parseProtocol(vs.Protocol)
			if err != nil {
				return sp, err
			}
			sp.proto = p
		}
	} else {
		if !vs.Address.IsValid() {
			return sp, fmt.Errorf("virtual server without an address or fwmark: %w", ipvs.ErrInvalid)
		}
		p, err := parseProtocol(vs.Protocol)
		if err != nil {
			return sp, err
		}
		a := vs.Address.Unmap()
		sp.key = svcKey{v6: a.Is6(), proto: p, addr: a, port: vs.Port}
		sp.proto = p
	}
	sp.schedName = vs.Scheduler
	sp.flags = vs.Flags &^ ipvs.FlagHashed
	sp.timeoutSec = vs.Timeout
	if sp.key.v6 {
		sp.bits6 = int(vs.Netmask)
		if sp.bits6 == 0 {
			sp.bits6 = 128
		}
		if sp.bits6 > 128 {
			return sp, fmt.Errorf("netmask /%d for an IPv6 service: %w", vs.Netmask, ipvs.ErrInvalid)
		}
	} else {
		b := vs.Netmask
		if b == 0 {
			b = 32
		}
		if b > 32 {
			return sp, fmt.Errorf("netmask /%d for an IPv4 service: %w", vs.Netmask, ipvs.ErrInvalid)
		}
		sp.mask4 = maskFromBits(int(b))
	}
	return sp, nil
}

func maskFromBits(b int) uint32 {
	if b <= 0 {
		return 0
	}
	return ^uint32(0) << (32 - b)
}

func keyFromVS(vs *ipvs.VirtualServer) (svcKey, error) {
	sp, err := specFromVS(vs)
	return sp.key, err
}

// virtualServer is the service as ipvs.Interface returns it (flags without FlagHashed).
// The value is cached until the service changes: callers must not modify it.
func (s *service) virtualServer() *ipvs.VirtualServer {
	if s.vs != nil {
		return s.vs
	}
	vs := &ipvs.VirtualServer{Scheduler: s.schedName, Flags: s.flags, Timeout: s.timeoutSec}
	if s.key.fwmark != 0 {
		vs.FWMark = s.key.fwmark
		if s.key.v6 {
			vs.Address = netip.IPv6Unspecified()
		}
	} else {
		vs.Address = s.key.addr
		vs.Port = s.key.port
		vs.Protocol = protoName(s.proto)
	}
	if s.key.v6 {
		vs.Netmask = uint32(s.bits6)
	} else {
		vs.Netmask = uint32(bits.LeadingZeros32(^s.mask4))
	}
	s.vs = vs
	return vs
}

func destSpecFromRS(rs *ipvs.RealServer) (destSpec, error) {
	if rs == nil || !rs.Address.IsValid() {
		return destSpec{}, fmt.Errorf("real server without an address: %w", ipvs.ErrInvalid)
	}
	return destSpec{addr: rs.Address.Unmap(), port: rs.Port, weight: rs.Weight, fwd: rs.Forward,
		uThresh: rs.UpperThreshold, lThresh: rs.LowerThreshold}, nil
}

func (d *dest) realServer() *ipvs.RealServer {
	return &ipvs.RealServer{Address: d.addr, Port: d.port, Weight: d.weight, Forward: d.fwd,
		UpperThreshold: d.uThresh, LowerThreshold: d.lThresh, ActiveConn: d.active,
		InactiveConn: d.inactive, PersistConn: d.persist, Overloaded: d.overload}
}

func (m *Model) lookupService(vs *ipvs.VirtualServer) (*service, error) {
	k, err := keyFromVS(vs)
	if err != nil {
		return nil, err
	}
	s := m.services[k]
	if s == nil {
		return nil, fmt.Errorf("virtual service %s: %w", k, ipvs.ErrNotFound)
	}
	return s, nil
}

// Flush deletes every virtual service (ipvsadm -C). Connection entries stay.
func (m *Model) Flush() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	for _, s := range m.sortedServices() {
		if err := m.delService(s.key); err != nil {
			return err
		}
	}
	return nil
}

// AddVirtualServer adds a virtual service (ipvsadm -A).
func (m *Model) AddVirtualServer(vs *ipvs.VirtualServer) error {
	sp, err := specFromVS(vs)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	return m.addService(sp)
}

// UpdateVirtualServer edits a virtual service (ipvsadm -E): scheduler, flags, timeout
// and netmask. A changed scheduler starts from its initial state.
func (m *Model) UpdateVirtualServer(vs *ipvs.VirtualServer) error {
	sp, err := specFromVS(vs)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	return m.editService(sp)
}

// DeleteVirtualServer deletes a virtual service (ipvsadm -D); its destinations go to the
// trash while connections still use them.
func (m *Model) DeleteVirtualServer(vs *ipvs.VirtualServer) error {
	k, err := keyFromVS(vs)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	return m.delService(k)
}

// GetVirtualServer returns the service with vs's key.
func (m *Model) GetVirtualServer(vs *ipvs.VirtualServer) (*ipvs.VirtualServer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	s, err := m.lookupService(vs)
	if err != nil {
		return nil, err
	}
	c := *s.virtualServer()
	return &c, nil
}

// GetVirtualServers returns every service in ipvsadm's listing order.
func (m *Model) GetVirtualServers() ([]*ipvs.VirtualServer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	var out []*ipvs.VirtualServer
	for _, s := range m.sortedServices() {
		c := *s.virtualServer()
		out = append(out, &c)
	}
	return out, nil
}

// AddRealServer adds a destination at the head of the service's list (or resurrects it
// from the trash, counters and all).
func (m *Model) AddRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	sp, err := destSpecFromRS(rs)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	s, err := m.lookupService(vs)
	if err != nil {
		return err
	}
	return m.addDest(s, sp)
}

// GetRealServers returns the service's destinations in kernel list order (the most
// recently added first), with their counters.
func (m *Model) GetRealServers(vs *ipvs.VirtualServer) ([]*ipvs.RealServer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	s, err := m.lookupService(vs)
	if err != nil {
		return nil, err
	}
	out := make([]*ipvs.RealServer, 0, len(s.dests))
	for _, d := range s.dests {
		out = append(out, d.realServer())
	}
	return out, nil
}

// DeleteRealServer removes a destination; it waits in the trash while connections use it.
func (m *Model) DeleteRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	if rs == nil || !rs.Address.IsValid() {
		return fmt.Errorf("real server without an address: %w", ipvs.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	s, err := m.lookupService(vs)
	if err != nil {
		return err
	}
	return m.delDest(s, rs.Address.Unmap(), rs.Port)
}

// UpdateRealServer edits a destination's weight, forwarding method and thresholds.
func (m *Model) UpdateRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	sp, err := destSpecFromRS(rs)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	s, err := m.lookupService(vs)
	if err != nil {
		return err
	}
	return m.editDest(s, sp)
}

// ConfigureTimeouts sets the TCP ESTABLISHED, TCP FIN_WAIT and UDP timeouts (ipvsadm
// --set); zero leaves a value unchanged. Values are whole seconds, as the kernel takes.
func (m *Model) ConfigureTimeouts(tcp, tcpFin, udp time.Duration) error {
	if tcp < 0 || tcpFin < 0 || udp < 0 {
		return fmt.Errorf("negative timeout: %w", ipvs.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	if s := tcp.Truncate(time.Second); s > 0 {
		m.tcpTimeouts[tcpEstablished] = s
	}
	if s := tcpFin.Truncate(time.Second); s > 0 {
		m.tcpTimeouts[tcpFinWait] = s
	}
	if s := udp.Truncate(time.Second); s > 0 {
		m.udpTimeout = s
	}
	return nil
}

// Timeouts returns the TCP ESTABLISHED, TCP FIN_WAIT and UDP timeouts (ipvsadm -L --timeout).
func (m *Model) Timeouts() (tcp, tcpFin, udp time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tcpTimeouts[tcpEstablished], m.tcpTimeouts[tcpFinWait], m.udpTimeout
}

// DestState overrides a destination's counters and OVERLOAD flag, to reproduce a state
// captured from a node (counters with no connection entries behind them stay as a base
// that expiring entries count down from). nil fields are left alone.
type DestState struct {
	Active     *int
	Inactive   *int
	Overloaded *bool
}

// SetDestState applies st to the destination rs of vs.
func (m *Model) SetDestState(vs *ipvs.VirtualServer, rs netip.AddrPort, st DestState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	s, err := m.lookupService(vs)
	if err != nil {
		return err
	}
	d := s.lookupDest(rs.Addr().Unmap(), rs.Port())
	if d == nil {
		return fmt.Errorf("real server %s in %s: %w", rs, s.key, ipvs.ErrNotFound)
	}
	return m.setDestState(d, st)
}

func (m *Model) setDestState(d *dest, st DestState) error {
	liveA, liveI := 0, 0
	for _, c := range m.allConns() {
		if c.dest == d && !c.template {
			if c.inactive {
				liveI++
			} else {
				liveA++
			}
		}
	}
	if st.Active != nil && *st.Active < liveA {
		return fmt.Errorf("active=%d is below the %d active connection entries of %s: %w", *st.Active, liveA, d.addrPort(), ipvs.ErrRange)
	}
	if st.Inactive != nil && *st.Inactive < liveI {
		return fmt.Errorf("inactive=%d is below the %d inactive connection entries of %s: %w", *st.Inactive, liveI, d.addrPort(), ipvs.ErrRange)
	}
	if st.Active != nil {
		d.active = *st.Active
	}
	if st.Inactive != nil {
		d.inactive = *st.Inactive
	}
	if st.Overloaded != nil {
		d.overload = *st.Overloaded
	}
	return nil
}
