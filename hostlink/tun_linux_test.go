//go:build linux

package hostlink

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/scenario"
)

// inNetns runs f on a thread that has joined the namespace (and is then thrown away),
// so that sockets f makes live there.
func inNetns(t *testing.T, name string, f func()) {
	t.Helper()
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			done <- err
			return
		}
		f()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func ipNetns(t *testing.T, ns string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}

func must(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// The TUN device, made in a fresh namespace, carries a real kernel's TCP (curl, and Go's
// net package) to a ClusterIP and a NodePort, and dig's query to kube-dns, under every
// mode; it refuses overlapping routes without Force, removes a stale device of its own
// and refuses to touch one that is not; Close removes it.
func TestTUN(t *testing.T) {
	kernel.RequireRoot(t)
	kernel.RequireTools(t, "ip")
	ns := kernel.NewTestNetns(t)
	for _, mode := range scenario.AvailableModes() {
		t.Run(mode, func(t *testing.T) {
			s, err := scenario.Load("testdata/web.yaml")
			if err != nil {
				t.Fatal(err)
			}
			live, err := scenario.Start(s, scenario.Options{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer live.Close()
			svc, _ := live.Cluster().Store().GetService("default", "web")
			vip := svc.Spec.ClusterIP
			var mu sync.Mutex
			var logged []string
			logf := func(f string, a ...any) {
				mu.Lock()
				logged = append(logged, fmt.Sprintf(f, a...))
				mu.Unlock()
			}
			tun, err := OpenTUN(live, TUNConfig{Netns: ns}, logf)
			if err != nil {
				t.Fatal(err)
			}
			defer tun.Close()
			if tun.Name() != DefaultTUNName {
				t.Errorf("name %q, want %s", tun.Name(), DefaultTUNName)
			}
			nodeB := live.Cluster().Node("node-b").IP()
			urls := []string{"http://" + vip + "/", fmt.Sprintf("http://%s:30080/", nodeB)}
			if _, err := exec.LookPath("curl"); err == nil {
				for _, u := range urls {
					out, err := ipNetns(t, ns, "curl", "-sS", "--max-time", "20", u)
					if err != nil {
						t.Fatalf("curl %s: %v: %s", u, err, out)
					}
					checkTUNWhoami(t, live, u, out)
				}
			}
			for _, u := range urls {
				var conn net.Conn
				var err error
				host := strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/")
				if !strings.Contains(host, ":") {
					host += ":80"
				}
				inNetns(t, ns, func() { conn, err = net.DialTimeout("tcp", host, 20*time.Second) })
				if err != nil {
					t.Fatalf("Go dial %s: %v", host, err)
				}
				conn.SetDeadline(time.Now().Add(20 * time.Second))
				fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatalf("Go GET %s: %v", u, err)
				}
				body, _ := io.ReadAll(resp.Body)
				conn.Close()
				checkTUNWhoami(t, live, u, string(body))
			}
			if _, err := exec.LookPath("dig"); err == nil {
				_, server := live.DNS()
				out, err := ipNetns(t, ns, "dig", "+short", "+time=5", "+tries=2", "@"+server.String(), "web.default.svc.cluster.local")
				if err != nil || strings.TrimSpace(out) != vip {
					t.Errorf("dig through the TUN: %q, %v; want %s", out, err, vip)
				}
			}
			tun.Close()
			if out, err := exec.Command("ip", "-n", ns, "link", "show", DefaultTUNName).CombinedOutput(); err == nil {
				t.Errorf("the device is still there after Close: %s", out)
			}
		})
	}
}

// checkTUNWhoami checks a web pod answered and saw a node's address (kube-proxy
// masquerades traffic from outside the pod network) or, for a NodePort in the
// userspace mode, the node's own.
func checkTUNWhoami(t *testing.T, live *scenario.Live, u, body string) {
	t.Helper()
	w, err := netsim.ParseWhoami(body)
	if err != nil {
		t.Fatalf("%s: %v", u, err)
	}
	if !strings.HasPrefix(w.Pod, "default/web-") {
		t.Errorf("%s: answered by %q", u, w.Pod)
	}
	checkSeen(t, live, "", "", w)
}

func TestTUNSafety(t *testing.T) {
	kernel.RequireRoot(t)
	kernel.RequireTools(t, "ip")
	ns := kernel.NewTestNetns(t)
	s, err := scenario.Load("testdata/web.yaml")
	if err != nil {
		t.Fatal(err)
	}
	live, err := scenario.Start(s, scenario.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	// A route of the host's that overlaps the service network: refused, then --force.
	must(t, "ip", "-n", ns, "tuntap", "add", "dev", "busy0", "mode", "tun")
	must(t, "ip", "-n", ns, "link", "set", "busy0", "up")
	must(t, "ip", "-n", ns, "route", "add", "10.96.0.0/16", "dev", "busy0")
	_, err = OpenTUN(live, TUNConfig{Netns: ns}, nil)
	if err == nil || !strings.Contains(err.Error(), "10.96.0.0/12 overlaps the route 10.96.0.0/16 dev busy0") {
		t.Errorf("overlapping route: %v", err)
	}
	if out, err := exec.Command("ip", "-n", ns, "link", "show", DefaultTUNName).CombinedOutput(); err == nil {
		t.Errorf("a refused start left the device: %s", out)
	}
	tun, err := OpenTUN(live, TUNConfig{Netns: ns, Force: true, Name: "clabf"}, nil)
	if err != nil {
		t.Fatalf("with Force: %v", err)
	}
	tun.Close()
	must(t, "ip", "-n", ns, "link", "del", "busy0")

	// A stale device of ours (persistent, with our alias) is removed, with a message.
	must(t, "ip", "-n", ns, "tuntap", "add", "dev", "clabs", "mode", "tun")
	must(t, "ip", "-n", ns, "link", "set", "clabs", "alias", tunAlias)
	var msgs []string
	tun, err = OpenTUN(live, TUNConfig{Netns: ns, Name: "clabs", Routes: nil, Via: "node-b"}, func(f string, a ...any) { msgs = append(msgs, fmt.Sprintf(f, a...)) })
	if err != nil {
		t.Fatalf("stale device: %v", err)
	}
	tun.Close()
	if len(msgs) != 1 || !strings.Contains(msgs[0], "removed the stale device clabs") {
		t.Errorf("messages %q, want one about the stale device", msgs)
	}
	// A device of that name that is not ours is left alone.
	must(t, "ip", "-n", ns, "tuntap", "add", "dev", "other0", "mode", "tun")
	_, err = OpenTUN(live, TUNConfig{Netns: ns, Name: "other0"}, nil)
	if err == nil || !strings.Contains(err.Error(), "a device other0 exists and is not clusterlab up's") {
		t.Errorf("someone else's device: %v", err)
	}
	must(t, "ip", "-n", ns, "link", "show", "other0")
}

// benchTUN: a socket in a fresh namespace sends through the TUN device to the sink's
// ClusterIP.
func benchTUN(b *testing.B) {
	kernel.RequireRoot(b)
	ns := kernel.NewTestNetns(b)
	live, target := startSink(b)
	tun, err := OpenTUN(live, TUNConfig{Netns: ns}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tun.Close()
	h, err := netns.GetFromName(ns)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	var c net.Conn
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			done <- err
			return
		}
		c, err = net.DialTimeout("tcp", target, 20*time.Second)
		done <- err
	}()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	bulk(b, c)
}
