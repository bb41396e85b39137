package netfilter

import (
	"fmt"
	"strconv"
	"strings"
)

// KernelVersion is a Linux release, major and minor ("5.9"). The zero KernelVersion
// means a current kernel (CurrentKernel): the datapath models today's kernel unless a
// node says otherwise, and kernel-behaviour changes (IPVS connection reuse in 5.9, ...)
// are decided by comparing a node's KernelVersion with the release that brought them.
type KernelVersion struct {
	Major, Minor int
}

// CurrentKernel is the release the zero KernelVersion stands for.
var CurrentKernel = KernelVersion{Major: 6, Minor: 12}

// ParseKernelVersion reads "5.4", "4.19.0-26-amd64" or "6.6.8+" (the patch level and
// any suffix are ignored).
func ParseKernelVersion(s string) (KernelVersion, error) {
	f := strings.FieldsFunc(strings.TrimSpace(s), func(r rune) bool { return r == '.' || r == '-' || r == '+' })
	if len(f) < 2 {
		return KernelVersion{}, fmt.Errorf("kernel version %q: want MAJOR.MINOR[.PATCH]", s)
	}
	var v [2]int
	for i := range 2 {
		n, err := strconv.Atoi(f[i])
		if err != nil || n < 0 {
			return KernelVersion{}, fmt.Errorf("kernel version %q: want MAJOR.MINOR[.PATCH]", s)
		}
		v[i] = n
	}
	if v[0] < 2 {
		return KernelVersion{}, fmt.Errorf("kernel version %q: want MAJOR.MINOR[.PATCH] of Linux 2.0 or later", s)
	}
	return KernelVersion{Major: v[0], Minor: v[1]}, nil
}

// MustParseKernelVersion is ParseKernelVersion for constants; it panics on a bad one.
func MustParseKernelVersion(s string) KernelVersion {
	v, err := ParseKernelVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// IsZero reports whether k is the zero KernelVersion (a current kernel).
func (k KernelVersion) IsZero() bool { return k == KernelVersion{} }

// Resolved is the release k stands for: CurrentKernel for the zero KernelVersion.
func (k KernelVersion) Resolved() KernelVersion {
	if k.IsZero() {
		return CurrentKernel
	}
	return k
}

// AtLeast reports whether k (resolved) is release o or later.
func (k KernelVersion) AtLeast(o KernelVersion) bool {
	r := k.Resolved()
	if r.Major != o.Major {
		return r.Major > o.Major
	}
	return r.Minor >= o.Minor
}

// String prints "5.9" ("current" for the zero KernelVersion).
func (k KernelVersion) String() string {
	if k.IsZero() {
		return "current"
	}
	return fmt.Sprintf("%d.%d", k.Major, k.Minor)
}
