//go:build !linux

package kernel

import (
	"errors"
	"net/netip"
	"runtime"
	"time"
)

type nsHandle struct{ name string }

var errNoNetns = errors.New("network namespaces need Linux, this is " + runtime.GOOS)

func openNetns(name string) (*nsHandle, error)      { return nil, errNoNetns }
func (h *nsHandle) close() error                    { return nil }
func (h *nsHandle) do(fn func() error) error        { return errNoNetns }
func (h *nsHandle) waitLinksUp(time.Duration) error { return errNoNetns }
func (h *nsHandle) addrs() ([]netip.Addr, error)    { return nil, errNoNetns }
