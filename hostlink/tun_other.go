//go:build !linux

package hostlink

import (
	"errors"

	"github.com/clusterlab/clusterlab/scenario"
)

// TUN is a TUN device bridged into the cluster (Linux only).
type TUN struct{}

// OpenTUN is Linux only.
func OpenTUN(*scenario.Live, TUNConfig, func(string, ...any)) (*TUN, error) {
	return nil, errors.New("a TUN device needs Linux")
}

// Close does nothing.
func (*TUN) Close() {}

// Opened says nothing.
func (*TUN) Opened() []string { return nil }
