package netsim

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// adviseHugePages asks the kernel to back the 2 MiB-aligned part of a large slice
// with transparent huge pages (MADV_HUGEPAGE; with THP in "madvise" mode, the
// common default, nothing else in a Go process gets them).
//
// The conntrack table is the datapath's one large randomly addressed structure: at
// 50,000 connections it is 8 MiB, and each new connection reads two slots far apart
// in it. In 4 KiB pages every such read is a TLB miss as well as a cache miss (under a
// hypervisor's nested paging, a walk of up to 24 memory references); the kernel's own
// conntrack hash sits in its direct map, on huge pages. Advice only: where THP is off
// or no huge page is free, the kernel keeps small pages; errors are ignored.
func adviseHugePages(p unsafe.Pointer, size uintptr) {
	const huge = 2 << 20
	start := (uintptr(p) + huge - 1) &^ (huge - 1)
	end := (uintptr(p) + size) &^ (huge - 1)
	if end <= start {
		return
	}
	_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, start-uintptr(p))), end-start), unix.MADV_HUGEPAGE)
}
