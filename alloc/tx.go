package alloc

import (
	"errors"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Tx makes one Service create, update or delete all or nothing across the
// allocators, the way kube-apiserver's service storage does:
//
//   - allocations happen immediately (so a failure is seen at once and later
//     allocations in the same request cannot pick the same value);
//   - releases are only recorded, and happen at Commit, after the object
//     change has been stored; until then the released values stay taken, so
//     no other request can grab them while this one may still fail;
//   - Revert undoes every allocation the Tx made and forgets the releases.
//
// Typical use by a service store:
//
//	tx := allocs.Begin()
//	defer tx.Revert() // no-op after Commit
//	ip, err := tx.AllocateNextIP(corev1.IPv4Protocol)          // clusterIPs[i] == ""
//	err = tx.AllocateIP(netip.MustParseAddr("10.96.0.10"))     // clusterIPs[i] given
//	port, err := tx.AllocateNextPort()                         // ports[j].nodePort == 0
//	tx.ReleasePort(oldNodePort)                                // update changed a nodePort
//	... store the object; on any error return (the deferred Revert rolls back)
//	tx.Commit()
//
// Errors are the allocators' own (their Error() is the API server's text);
// wrap them as the registry does, e.g. "failed to allocate IP <ip>: <err>"
// for a requested IP and "failed to allocate a serviceIP: <err>" for a
// dynamic one. Deciding what to allocate (families per ipFamilyPolicy, one
// nodePort per port number shared by TCP and UDP, a healthCheckNodePort) is
// the caller's job; NodePortsOf lists what a stored Service holds.
//
// Allocating a value whose release is pending in the same Tx (an update that
// drops a nodePort and then asks for the same number again) cancels the
// release instead of failing with "already allocated"; a later Revert leaves
// that value with its original owner. (Should the value not be marked at all,
// it is allocated as usual and the release is still cancelled.)
//
// A Tx is for one goroutine. Using it after Commit or Revert panics, except
// that Revert after Commit (and a second Commit or Revert) does nothing.
type Tx struct {
	a     *Allocators
	state txState
	ips   ledger[netip.Addr]
	ports ledger[int]
}

type txState uint8

const (
	txOpen txState = iota
	txCommitted
	txReverted
)

// ledger records what a Tx allocated (to undo on Revert) and what it will
// release (on Commit), each in first-seen order.
type ledger[T comparable] struct {
	taken   []T
	pending []T
}

func (l *ledger[T]) take(v T) {
	if !slices.Contains(l.taken, v) {
		l.taken = append(l.taken, v)
	}
}

func (l *ledger[T]) schedule(v T) {
	if !slices.Contains(l.pending, v) {
		l.pending = append(l.pending, v)
	}
}

// reclaim drops v from the pending releases; it reports whether it was there.
func (l *ledger[T]) reclaim(v T) bool {
	i := slices.Index(l.pending, v)
	if i < 0 {
		return false
	}
	l.pending = slices.Delete(l.pending, i, i+1)
	return true
}

// Begin starts a transaction over a's allocators.
func (a *Allocators) Begin() *Tx { return &Tx{a: a} }

func (tx *Tx) mustBeOpen() {
	if tx.state != txOpen {
		panic("alloc: Tx used after Commit or Revert")
	}
}

// AllocateIP reserves a requested ClusterIP in the allocator of its family.
// It returns a *FamilyNotConfiguredError when the cluster has no range of
// that family, else the allocator's error (*NotInRangeError,
// ErrIPAllocated).
func (tx *Tx) AllocateIP(ip netip.Addr) error {
	tx.mustBeOpen()
	if !ip.IsValid() {
		return errors.New("alloc: AllocateIP of the zero netip.Addr")
	}
	ip = ip.Unmap().WithZone("")
	ipa := tx.a.ForIP(ip)
	if ipa == nil {
		return &FamilyNotConfiguredError{Family: FamilyOf(ip)}
	}
	wasPending := tx.ips.reclaim(ip)
	if wasPending && ipa.Has(ip) {
		return nil
	}
	if err := ipa.Allocate(ip); err != nil {
		if wasPending {
			tx.ips.schedule(ip)
		}
		return err
	}
	tx.ips.take(ip)
	return nil
}

// AllocateNextIP reserves a ClusterIP of family chosen by the allocator (see
// IPAllocator.AllocateNext). It returns a *FamilyNotConfiguredError when the
// cluster has no range of that family, or ErrFull.
func (tx *Tx) AllocateNextIP(family corev1.IPFamily) (netip.Addr, error) {
	tx.mustBeOpen()
	ipa := tx.a.ForFamily(family)
	if ipa == nil {
		return netip.Addr{}, &FamilyNotConfiguredError{Family: family}
	}
	ip, err := ipa.AllocateNext()
	if err != nil {
		return netip.Addr{}, err
	}
	tx.ips.reclaim(ip) // a pending release of an unmarked value no longer applies
	tx.ips.take(ip)
	return ip, nil
}

// ReleaseIP schedules ip to be released at Commit. An IP of an unconfigured
// family, out of range or not allocated is released as a no-op.
func (tx *Tx) ReleaseIP(ip netip.Addr) {
	tx.mustBeOpen()
	tx.ips.schedule(ip.Unmap().WithZone(""))
}

// AllocatePort reserves a requested node port. It returns the allocator's
// error (*NotInRangeError, ErrPortAllocated); with no node port allocator
// every port is out of range.
func (tx *Tx) AllocatePort(port int) error {
	tx.mustBeOpen()
	pa := tx.a.NodePorts
	if pa == nil {
		return &NotInRangeError{Resource: ResourceNodePort, Port: port}
	}
	wasPending := tx.ports.reclaim(port)
	if wasPending && pa.Has(port) {
		return nil
	}
	if err := pa.Allocate(port); err != nil {
		if wasPending {
			tx.ports.schedule(port)
		}
		return err
	}
	tx.ports.take(port)
	return nil
}

// AllocateNextPort reserves a node port chosen by the allocator (see
// PortAllocator.AllocateNext), or returns ErrFull.
func (tx *Tx) AllocateNextPort() (int, error) {
	tx.mustBeOpen()
	pa := tx.a.NodePorts
	if pa == nil {
		return 0, ErrFull
	}
	port, err := pa.AllocateNext()
	if err != nil {
		return 0, err
	}
	tx.ports.reclaim(port) // a pending release of an unmarked value no longer applies
	tx.ports.take(port)
	return port, nil
}

// ReleasePort schedules port to be released at Commit.
func (tx *Tx) ReleasePort(port int) {
	tx.mustBeOpen()
	tx.ports.schedule(port)
}

// Commit performs the scheduled releases and ends the transaction; what it
// allocated stays allocated. A second Commit does nothing; Commit after
// Revert panics.
func (tx *Tx) Commit() {
	switch tx.state {
	case txCommitted:
		return
	case txReverted:
		panic("alloc: Tx.Commit after Revert")
	}
	for _, ip := range tx.ips.pending {
		if ipa := tx.a.ForIP(ip); ipa != nil {
			ipa.Release(ip)
		}
	}
	if tx.a.NodePorts != nil {
		for _, p := range tx.ports.pending {
			tx.a.NodePorts.Release(p)
		}
	}
	tx.state = txCommitted
}

// Revert releases everything the transaction allocated, drops the scheduled
// releases and ends the transaction. After Commit, or a second time, it does
// nothing, so `defer tx.Revert()` is the usual guard.
func (tx *Tx) Revert() {
	if tx.state != txOpen {
		return
	}
	for _, ip := range tx.ips.taken {
		if ipa := tx.a.ForIP(ip); ipa != nil {
			ipa.Release(ip)
		}
	}
	if tx.a.NodePorts != nil {
		for _, p := range tx.ports.taken {
			tx.a.NodePorts.Release(p)
		}
	}
	tx.state = txReverted
}

// AllocatedIPs returns the IPs this transaction allocated, in order.
func (tx *Tx) AllocatedIPs() []netip.Addr { return slices.Clone(tx.ips.taken) }

// AllocatedPorts returns the ports this transaction allocated, in order.
func (tx *Tx) AllocatedPorts() []int { return slices.Clone(tx.ports.taken) }

// PendingIPReleases returns the IPs Commit will release, in order.
func (tx *Tx) PendingIPReleases() []netip.Addr { return slices.Clone(tx.ips.pending) }

// PendingPortReleases returns the ports Commit will release, in order.
func (tx *Tx) PendingPortReleases() []int { return slices.Clone(tx.ports.pending) }
