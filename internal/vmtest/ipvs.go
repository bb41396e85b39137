package vmtest

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// The JSON forms of the ipvs package's types, and the listing both sides take through
// ipvs.Interface: the agent from the kernel adapter, the host from the model.

// FromVS converts an ipvs.VirtualServer.
func FromVS(vs *ipvs.VirtualServer) VirtualServer {
	out := VirtualServer{Protocol: vs.Protocol, Port: vs.Port, FWMark: vs.FWMark, Scheduler: vs.Scheduler,
		Flags: uint32(vs.Flags), Timeout: vs.Timeout, Netmask: vs.Netmask}
	if vs.Address.IsValid() {
		out.Address = vs.Address.String()
	}
	return out
}

// ToVS converts back; a bad address is an error naming it.
func (v VirtualServer) ToVS() (*ipvs.VirtualServer, error) {
	vs := &ipvs.VirtualServer{Protocol: v.Protocol, Port: v.Port, FWMark: v.FWMark, Scheduler: v.Scheduler,
		Flags: ipvs.ServiceFlags(v.Flags), Timeout: v.Timeout, Netmask: v.Netmask}
	if v.Address != "" {
		a, err := netip.ParseAddr(v.Address)
		if err != nil {
			return nil, fmt.Errorf("virtual server address %q: %w", v.Address, err)
		}
		vs.Address = a
	}
	return vs, nil
}

// FromRS converts an ipvs.RealServer.
func FromRS(rs *ipvs.RealServer) RealServer {
	return RealServer{Address: rs.Address.String(), Port: rs.Port, Weight: rs.Weight, Forward: uint32(rs.Forward),
		UpperThreshold: rs.UpperThreshold, LowerThreshold: rs.LowerThreshold, ActiveConn: rs.ActiveConn,
		InactiveConn: rs.InactiveConn, PersistConn: rs.PersistConn}
}

// ToRS converts back.
func (r RealServer) ToRS() (*ipvs.RealServer, error) {
	a, err := netip.ParseAddr(r.Address)
	if err != nil {
		return nil, fmt.Errorf("real server address %q: %w", r.Address, err)
	}
	return &ipvs.RealServer{Address: a, Port: r.Port, Weight: r.Weight, Forward: ipvs.ForwardMethod(r.Forward),
		UpperThreshold: r.UpperThreshold, LowerThreshold: r.LowerThreshold}, nil
}

// Listing lists every virtual server of v, sorted by family, address, protocol, port and
// mark, each with its real servers in the order v gives them (the kernel's list order).
func Listing(v ipvs.Interface) ([]Service, error) {
	vss, err := v.GetVirtualServers()
	if err != nil {
		return nil, err
	}
	out := make([]Service, 0, len(vss))
	for _, vs := range vss {
		rss, err := v.GetRealServers(vs)
		if err != nil {
			return nil, err
		}
		s := Service{VS: FromVS(vs), Destinations: []RealServer{}}
		s.VS.Flags &^= uint32(ipvs.FlagHashed) // the kernel's own bit, as kube-proxy strips it
		for _, rs := range rss {
			s.Destinations = append(s.Destinations, FromRS(rs))
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Service) int {
		return cmp.Or(cmp.Compare(a.VS.FWMark, b.VS.FWMark), cmp.Compare(a.VS.Address, b.VS.Address),
			cmp.Compare(a.VS.Protocol, b.VS.Protocol), cmp.Compare(a.VS.Port, b.VS.Port))
	})
	return out, nil
}

// ErrClass names the ipvs package's errno an error matches: "exist", "notfound",
// "invalid", "range", "other", or "" for nil.
func ErrClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ipvs.ErrExist):
		return "exist"
	case errors.Is(err, ipvs.ErrNotFound):
		return "notfound"
	case errors.Is(err, ipvs.ErrInvalid):
		return "invalid"
	case errors.Is(err, ipvs.ErrRange):
		return "range"
	}
	return "other"
}

// Do makes one call on v.
func (c Call) Do(v ipvs.Interface) error {
	var vs *ipvs.VirtualServer
	var rs *ipvs.RealServer
	var err error
	if c.VS != nil {
		if vs, err = c.VS.ToVS(); err != nil {
			return err
		}
	}
	if c.RS != nil {
		if rs, err = c.RS.ToRS(); err != nil {
			return err
		}
	}
	switch c.Method {
	case "Flush":
		return v.Flush()
	case "AddVirtualServer":
		return v.AddVirtualServer(vs)
	case "UpdateVirtualServer":
		return v.UpdateVirtualServer(vs)
	case "DeleteVirtualServer":
		return v.DeleteVirtualServer(vs)
	case "GetVirtualServer":
		_, err := v.GetVirtualServer(vs)
		return err
	case "AddRealServer":
		return v.AddRealServer(vs, rs)
	case "UpdateRealServer":
		return v.UpdateRealServer(vs, rs)
	case "DeleteRealServer":
		return v.DeleteRealServer(vs, rs)
	case "ConfigureTimeouts":
		if c.Times == nil {
			return errors.New("ConfigureTimeouts without timeouts")
		}
		s := func(n int) time.Duration { return time.Duration(n) * time.Second }
		return v.ConfigureTimeouts(s(c.Times.TCP), s(c.Times.TCPFin), s(c.Times.UDP))
	}
	return fmt.Errorf("unknown method %q", c.Method)
}

// String is the call as Go would write it, for messages.
func (c Call) String() string {
	s := c.Method + "("
	if c.VS != nil {
		s += fmt.Sprintf("%+v", *c.VS)
	}
	if c.RS != nil {
		s += fmt.Sprintf(", %+v", *c.RS)
	}
	if c.Times != nil {
		s += fmt.Sprintf("%+v", *c.Times)
	}
	return s + ")"
}
