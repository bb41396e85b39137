//go:build !linux

package kernel

import (
	"errors"
	"runtime"
	"time"

	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// IPVS is the kernel IPVS adapter; on this platform every constructor fails with
// ErrIPVSUnsupported.
type IPVS struct{}

var _ ipvs.Interface = (*IPVS)(nil)

var errNotLinux = errors.New("IPVS needs Linux, this is " + runtime.GOOS)

// CheckIPVS reports why IPVS cannot be used: always, off Linux.
func CheckIPVS() error { return &IPVSUnsupportedError{Err: errNotLinux} }

// NewIPVS fails with ErrIPVSUnsupported off Linux.
func NewIPVS(netns string) (*IPVS, error) { return nil, CheckIPVS() }

func (*IPVS) Close()                                                       {}
func (*IPVS) Flush() error                                                 { return CheckIPVS() }
func (*IPVS) AddVirtualServer(*ipvs.VirtualServer) error                   { return CheckIPVS() }
func (*IPVS) UpdateVirtualServer(*ipvs.VirtualServer) error                { return CheckIPVS() }
func (*IPVS) DeleteVirtualServer(*ipvs.VirtualServer) error                { return CheckIPVS() }
func (*IPVS) GetVirtualServers() ([]*ipvs.VirtualServer, error)            { return nil, CheckIPVS() }
func (*IPVS) AddRealServer(*ipvs.VirtualServer, *ipvs.RealServer) error    { return CheckIPVS() }
func (*IPVS) DeleteRealServer(*ipvs.VirtualServer, *ipvs.RealServer) error { return CheckIPVS() }
func (*IPVS) UpdateRealServer(*ipvs.VirtualServer, *ipvs.RealServer) error { return CheckIPVS() }
func (*IPVS) ConfigureTimeouts(tcp, tcpFin, udp time.Duration) error       { return CheckIPVS() }
func (*IPVS) GetVirtualServer(*ipvs.VirtualServer) (*ipvs.VirtualServer, error) {
	return nil, CheckIPVS()
}
func (*IPVS) GetRealServers(*ipvs.VirtualServer) ([]*ipvs.RealServer, error) {
	return nil, CheckIPVS()
}
