package alloc

import (
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// The allocator errors carry the kube-apiserver's exact texts (from
// pkg/registry/core/service/ipallocator and portallocator), so a caller that
// wraps them the way the service registry does ("failed to allocate IP <ip>:
// <err>") prints what a real cluster prints.
//
// Match them with errors.Is / errors.As or the Is* predicates below:
//
//	errors.Is(err, ErrFull)              // either allocator is exhausted
//	errors.Is(err, ErrAllocated)         // IP or port already taken
//	errors.Is(err, ErrMismatchedNetwork) // snapshot of another range
//	var nr *NotInRangeError; errors.As(err, &nr)
var (
	// ErrFull is returned by AllocateNext when no value is free.
	ErrFull = errors.New("range is full")

	// ErrAllocated matches (errors.Is) both ErrIPAllocated and
	// ErrPortAllocated. The allocators never return it directly.
	ErrAllocated = errors.New("already allocated")

	// ErrIPAllocated is returned by IPAllocator.Allocate for a taken IP.
	ErrIPAllocated error = &allocatedError{msg: "provided IP is already allocated"}

	// ErrPortAllocated is returned by PortAllocator.Allocate for a taken port.
	ErrPortAllocated error = &allocatedError{msg: "provided port is already allocated"}

	// ErrMismatchedNetwork is returned by IPAllocator.Restore for a snapshot
	// of another CIDR. It also matches ErrMismatchedPortRange.
	ErrMismatchedNetwork = errors.New("the provided network does not match the current range")

	// ErrMismatchedPortRange is returned by PortAllocator.Restore for a
	// snapshot of another port range; errors.Is(ErrMismatchedPortRange,
	// ErrMismatchedNetwork) is true.
	ErrMismatchedPortRange error = &mismatchedPortsError{}
)

type allocatedError struct{ msg string }

func (e *allocatedError) Error() string        { return e.msg }
func (e *allocatedError) Is(target error) bool { return target == ErrAllocated }

type mismatchedPortsError struct{}

func (e *mismatchedPortsError) Error() string {
	return "the provided port range does not match the current port range"
}
func (e *mismatchedPortsError) Is(target error) bool { return target == ErrMismatchedNetwork }

// NotInRangeError reports a requested IP or port outside the allocator's
// usable values (for IPs this includes the network address, the IPv4
// broadcast address and, for IPv6, addresses past the 65536-entry cap).
type NotInRangeError struct {
	// Resource is ResourceClusterIP or ResourceNodePort.
	Resource Resource
	// IP is the rejected address (ResourceClusterIP).
	IP netip.Addr
	// Port is the rejected port (ResourceNodePort).
	Port int
	// ValidRange is the allocator's range as text: "10.96.0.0/12" or
	// "30000-32767".
	ValidRange string
}

// Error returns the API server's text:
//
//	the provided IP (<ip>) is not in the valid range. The range of valid IPs is <cidr>
//	provided port is not in the valid range. The range of valid ports is <base>-<last>
func (e *NotInRangeError) Error() string {
	if e.Resource == ResourceClusterIP {
		return fmt.Sprintf("the provided IP (%s) is not in the valid range. The range of valid IPs is %s", e.IP, e.ValidRange)
	}
	return fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %s", e.ValidRange)
}

// FamilyNotConfiguredError is returned by a Tx asked for an IP of a family
// that has no allocator (a single-stack cluster asked for the other family).
type FamilyNotConfiguredError struct {
	Family corev1.IPFamily
}

// Error returns the service registry's text, "<family> is not configured on
// this cluster".
func (e *FamilyNotConfiguredError) Error() string {
	return fmt.Sprintf("%s is not configured on this cluster", e.Family)
}

// IsFull reports whether err is (or wraps) ErrFull.
func IsFull(err error) bool { return errors.Is(err, ErrFull) }

// IsAllocated reports whether err is (or wraps) an "already allocated" error
// of either allocator.
func IsAllocated(err error) bool { return errors.Is(err, ErrAllocated) }

// IsNotInRange reports whether err is (or wraps) a *NotInRangeError.
func IsNotInRange(err error) bool {
	var nr *NotInRangeError
	return errors.As(err, &nr)
}

// IsMismatchedNetwork reports whether err is (or wraps) ErrMismatchedNetwork
// or ErrMismatchedPortRange.
func IsMismatchedNetwork(err error) bool { return errors.Is(err, ErrMismatchedNetwork) }

// IsFamilyNotConfigured reports whether err is (or wraps) a
// *FamilyNotConfiguredError.
func IsFamilyNotConfigured(err error) bool {
	var fe *FamilyNotConfiguredError
	return errors.As(err, &fe)
}
