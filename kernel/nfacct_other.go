//go:build !linux

package kernel

// EnsureNFAcct needs Linux.
func EnsureNFAcct(netns, name string) error { return errNoNetns }

// ListNFAcct needs Linux.
func ListNFAcct(netns string) ([]NFAcct, error) { return nil, errNoNetns }
