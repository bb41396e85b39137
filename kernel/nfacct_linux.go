//go:build linux

package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// nfnetlink_acct, include/uapi/linux/netfilter/nfnetlink_acct.h.
const (
	nfnlSubsysAcct = 7
	nfnlMsgAcctNew = 0
	nfnlMsgAcctGet = 1
	nfacctName     = 1
	nfacctPkts     = 2
	nfacctBytes    = 3
	nfacctNameMax  = 32 // NFACCT_NAME_MAX, including the NUL
)

// EnsureNFAcct creates the named accounting object in the named network namespace
// (HostNamespace for the caller's own; "" is an error) unless it exists; an existing
// one keeps its counters.
func EnsureNFAcct(netns, name string) error {
	if name == "" || len(name) >= nfacctNameMax {
		return fmt.Errorf("nfacct: bad name %q (1-%d bytes)", name, nfacctNameMax-1)
	}
	return inNamedNetns(netns, func() error {
		req := nl.NewNetlinkRequest(nfnlSubsysAcct<<8|nfnlMsgAcctNew, unix.NLM_F_CREATE|unix.NLM_F_ACK)
		req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
		req.AddData(nl.NewRtAttr(nfacctName, nl.ZeroTerminated(name)))
		_, err := req.Execute(unix.NETLINK_NETFILTER, 0)
		// The kernel answers EBUSY for an existing object (without NLM_F_REPLACE, which
		// would zero its counters).
		if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("nfacct: create %q in netns %q: %w", name, netns, err)
		}
		return nil
	})
}

// ListNFAcct returns every accounting object in the named network namespace
// (HostNamespace for the caller's own; "" is an error) with its counters.
func ListNFAcct(netns string) ([]NFAcct, error) {
	var out []NFAcct
	err := inNamedNetns(netns, func() error {
		req := nl.NewNetlinkRequest(nfnlSubsysAcct<<8|nfnlMsgAcctGet, unix.NLM_F_DUMP)
		req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
		msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
		if err != nil {
			return fmt.Errorf("nfacct: list in netns %q: %w", netns, err)
		}
		for _, m := range msgs {
			if len(m) < int(unsafe.Sizeof(nl.Nfgenmsg{})) {
				return fmt.Errorf("nfacct: short message (%d bytes)", len(m))
			}
			attrs, err := nl.ParseRouteAttr(m[unsafe.Sizeof(nl.Nfgenmsg{}):])
			if err != nil {
				return fmt.Errorf("nfacct: %w", err)
			}
			var a NFAcct
			for _, at := range attrs {
				switch at.Attr.Type & nl.NLA_TYPE_MASK {
				case nfacctName:
					a.Name = string(trimNUL(at.Value))
				case nfacctPkts:
					if len(at.Value) == 8 {
						a.Packets = binary.BigEndian.Uint64(at.Value)
					}
				case nfacctBytes:
					if len(at.Value) == 8 {
						a.Bytes = binary.BigEndian.Uint64(at.Value)
					}
				}
			}
			out = append(out, a)
		}
		return nil
	})
	return out, err
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// inNamedNetns runs fn in the named namespace, or directly for HostNamespace; "" is
// an error and fn does not run.
func inNamedNetns(netns string, fn func() error) error {
	if err := checkNetns("nfacct", netns); err != nil {
		return err
	}
	if isHost(netns) {
		return fn()
	}
	h, err := openNetns(netns)
	if err != nil {
		return err
	}
	defer h.close()
	return h.do(fn)
}
