//go:build linux

package kernel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// nsHandle is an open named network namespace.
type nsHandle struct {
	name string
	f    *os.File
	dev  uint64
	ino  uint64
}

func openNetns(name string) (*nsHandle, error) {
	p := filepath.Join(netnsDir, name)
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat netns %s: %w", name, err)
	}
	return &nsHandle{name: name, f: f, dev: uint64(st.Dev), ino: st.Ino}, nil
}

func (h *nsHandle) close() error { return h.f.Close() }

// do runs fn on a fresh OS thread that has joined the namespace. Sockets fn creates
// belong to that namespace for life, and may be used from any goroutine afterwards.
//
// The goroutine locks its thread, setns(2)es it, checks through /proc/thread-self that
// the switch really happened (so a failure can never make fn act on the caller's
// namespace), runs fn, and exits still locked: the Go runtime then destroys the thread
// instead of returning a thread in a foreign namespace to its pool. Threads the runtime
// starts meanwhile come from its template thread, never from this one.
func (h *nsHandle) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread, on purpose: see above.
		if err := unix.Setns(int(h.f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", h.name, err)
			return
		}
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			errc <- fmt.Errorf("verify netns %s: %w", h.name, err)
			return
		}
		if uint64(st.Dev) != h.dev || st.Ino != h.ino {
			errc <- fmt.Errorf("verify netns %s: thread is in netns inode %d, want %d", h.name, st.Ino, h.ino)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// waitLinksUp waits until every administratively-up interface in the namespace (except
// lo, and bridges without ports) is operationally up. Until the kernel's linkwatch
// work has seen a new veth's carrier (it runs up to a second later) the device still
// has the noop qdisc and silently drops what is sent through it, so a harness used
// straight away would lose its first packets. The wait is event-driven: a link
// subscription in the namespace, checked against a dump taken after subscribing.
func (h *nsHandle) waitLinksUp(timeout time.Duration) error {
	ch := make(chan netlink.LinkUpdate, 1024)
	done := make(chan struct{})
	defer close(done)
	var nh *netlink.Handle
	err := h.do(func() error {
		if err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{}); err != nil {
			return fmt.Errorf("subscribe to links: %w", err)
		}
		var err error
		nh, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		return fmt.Errorf("netns %s: %w", h.name, err)
	}
	defer nh.Close()
	links, err := nh.LinkList()
	if err != nil {
		return fmt.Errorf("netns %s: list links: %w", h.name, err)
	}
	state := map[int]netlink.Link{}
	for _, l := range links {
		state[l.Attrs().Index] = l
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		pending := linksNotUp(state)
		if len(pending) == 0 {
			return nil
		}
		select {
		case u, ok := <-ch:
			if !ok {
				return fmt.Errorf("netns %s: link subscription closed with %v not up", h.name, pending)
			}
			if u.Header.Type == unix.RTM_DELLINK {
				delete(state, int(u.Index))
			} else {
				state[u.Link.Attrs().Index] = u.Link
			}
		case <-timer.C:
			return fmt.Errorf("netns %s: links %v not up after %v", h.name, pending, timeout)
		}
	}
}

func linksNotUp(state map[int]netlink.Link) []string {
	hasPorts := map[int]bool{}
	for _, l := range state {
		if m := l.Attrs().MasterIndex; m != 0 {
			hasPorts[m] = true
		}
	}
	var pending []string
	for idx, l := range state {
		a := l.Attrs()
		if a.Flags&net.FlagUp == 0 || a.Flags&net.FlagLoopback != 0 {
			continue
		}
		if l.Type() == "bridge" && !hasPorts[idx] {
			continue
		}
		if a.OperState != netlink.OperUp {
			pending = append(pending, a.Name+"("+a.OperState.String()+")")
		}
	}
	sort.Strings(pending)
	return pending
}

// addrs lists every address configured in the namespace (all interfaces, both
// families, loopback included), as netlink reports them.
func (h *nsHandle) addrs() ([]netip.Addr, error) {
	var nh *netlink.Handle
	if err := h.do(func() error {
		var err error
		nh, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	}); err != nil {
		return nil, err
	}
	defer nh.Close()
	// A dump the kernel interrupted (the addresses changed meanwhile: a namespace
	// being set up beside) is asked again; the CI's VM saw one.
	list, err := nh.AddrList(nil, netlink.FAMILY_ALL)
	for try := 0; errors.Is(err, netlink.ErrDumpInterrupted) && try < 5; try++ {
		list, err = nh.AddrList(nil, netlink.FAMILY_ALL)
	}
	if err != nil {
		return nil, fmt.Errorf("netns %s: list addresses: %w", h.name, err)
	}
	var out []netip.Addr
	for _, a := range list {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			ip = ip.Unmap()
			if !slices.Contains(out, ip) {
				out = append(out, ip)
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out, nil
}
