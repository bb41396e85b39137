package kernel

import (
	"errors"
	"fmt"
	"strings"
)

// netnsDir is where iproute2 keeps named network namespaces.
const netnsDir = "/run/netns"

// HostNamespace, given as an adapter's namespace (IPTablesOptions.Netns,
// ConntrackOptions.Netns, NFTablesOptions.Netns, NewIPVS, DetectBackend, EnsureNFAcct,
// ListNFAcct), makes it act on the calling process's own network namespace: on a
// node, the host's own rules. Nothing acts there by default: an empty namespace is an
// error (ErrNoNamespace), so that a forgotten name can never reprogram the machine.
// The value is no name `ip netns add` accepts (names hold no '/').
const HostNamespace = "/proc/self/ns/net"

// ErrNoNamespace is the error of an adapter given no network namespace.
var ErrNoNamespace = errors.New("no network namespace: give one, or HostNamespace to act on this process's own")

// checkNetns says whether netns names a namespace an adapter may act in: HostNamespace,
// or a name iproute2 keeps under /run/netns. what names the adapter in the error.
func checkNetns(what, netns string) error {
	switch {
	case netns == HostNamespace:
		return nil
	case netns == "":
		return fmt.Errorf("%s: %w", what, ErrNoNamespace)
	case strings.ContainsAny(netns, "/\x00") || netns == "." || netns == ".." || strings.HasPrefix(netns, "-") ||
		strings.ContainsAny(netns, " \t\n"):
		return fmt.Errorf("%s: bad network namespace name %q (want a name under %s, or HostNamespace)", what, netns, netnsDir)
	}
	return nil
}

// isHost reports whether netns is the caller's own namespace.
func isHost(netns string) bool { return netns == HostNamespace }
