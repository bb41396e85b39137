//go:build !linux

package netsim

import "unsafe"

// adviseHugePages is a no-op where there is no MADV_HUGEPAGE (hugepage_linux.go).
func adviseHugePages(unsafe.Pointer, uintptr) {}
