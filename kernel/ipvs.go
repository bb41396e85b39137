package kernel

import "errors"

// ErrIPVSUnsupported means the running kernel cannot do IPVS: the "IPVS" generic-netlink
// family is not registered (CONFIG_IP_VS missing or the ip_vs module not loaded), or the
// build is not for Linux. NewIPVS and CheckIPVS return an *IPVSUnsupportedError, which
// matches it, so errors.Is(err, ErrIPVSUnsupported) works. The caller chooses what to do
// instead (the userspace IPVS model, the iptables mode); this package never falls back
// silently.
var ErrIPVSUnsupported = errors.New("IPVS not supported by this kernel")

// IPVSUnsupportedError is the typed error of a kernel (or a platform) without IPVS: why
// (Reason) and the underlying error (Err: the netlink ENOENT on Linux). It matches
// ErrIPVSUnsupported with errors.Is and unwraps to Err, so errors.Is(err,
// syscall.ENOENT) works too; errors.As gives the details.
type IPVSUnsupportedError struct {
	Reason string
	Err    error
}

func (e *IPVSUnsupportedError) Error() string {
	s := ErrIPVSUnsupported.Error()
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports whether target is ErrIPVSUnsupported.
func (e *IPVSUnsupportedError) Is(target error) bool { return target == ErrIPVSUnsupported }

// Unwrap returns the underlying error.
func (e *IPVSUnsupportedError) Unwrap() error { return e.Err }
