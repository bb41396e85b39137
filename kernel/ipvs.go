package kernel

import "errors"

// ErrIPVSUnsupported means the running kernel cannot do IPVS: the "IPVS" generic-netlink
// family is not registered (CONFIG_IP_VS missing or the ip_vs module not loaded), or the
// build is not for Linux. NewIPVS and CheckIPVS return errors that wrap it together with
// the cause, so errors.Is(err, ErrIPVSUnsupported) works. The caller chooses what to do
// instead (the userspace IPVS model, the iptables mode); this package never falls back
// silently.
var ErrIPVSUnsupported = errors.New("IPVS not supported by this kernel")
