//go:build linux

package emulator

import (
	"net"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/clusterlab/clusterlab/netfilter"
)

// TestEqualPriorityKernel (root): the kernel runs the later of two base chains of
// equal priority first: a packet the node sends gets t2's mark, as the emulator's
// order says.
func TestEqualPriorityKernel(t *testing.T) {
	ns := newNetns(t)
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	f, err := os.CreateTemp(t.TempDir(), "tie*.nft")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(tieScript); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run(t, "ip", "netns", "exec", ns, "nft", "-f", f.Name())
	if err := sendUDPIn(ns); err != nil {
		t.Fatal(err)
	}
	out := run(t, "ip", "netns", "exec", ns, "nft", "list", "table", "ip", "t3")
	var mark1, mark2 bool
	for _, line := range strings.Split(out, "\n") {
		counted := strings.Contains(line, "counter packets") && !strings.Contains(line, "counter packets 0 ")
		mark1 = mark1 || counted && strings.Contains(line, "meta mark 0x00000001")
		mark2 = mark2 || counted && strings.Contains(line, "meta mark 0x00000002")
	}
	if !mark2 || mark1 {
		t.Errorf("the kernel: t2's mark counted %v, t1's %v; want t2's only:\n%s", mark2, mark1, out)
	}
	e, err := Load([]byte(tieScript), "tie.nft")
	if err != nil {
		t.Fatal(err)
	}
	if first := e.BaseChains(netfilter.Output)[0]; first.Table != "t2" {
		t.Errorf("the emulator runs %s first, the kernel t2", first.Table)
	}
}

// sendUDPIn sends one UDP datagram to 127.0.0.1:9 from inside the named network
// namespace, on a thread that joins it and is never returned to the runtime's pool.
func sendUDPIn(ns string) error {
	fd, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return err
	}
	defer fd.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Setns(int(fd.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		c, err := net.Dial("udp", "127.0.0.1:9")
		if err != nil {
			errc <- err
			return
		}
		_, err = c.Write([]byte("x"))
		c.Close()
		errc <- err
	}()
	return <-errc
}
