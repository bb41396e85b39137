package emulator

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/kernel"
	kp "github.com/clusterlab/clusterlab/proxy/iptables"
)

// fzDefaultCases is how many cases the differential fuzzer draws in a plain `go test`;
// CLUSTERLAB_DIFFFUZZ=N asks for N from a random seed instead.
const fzDefaultCases = 120

// fzKernel is the fuzzer's real network: kernel.Harness's node with the client and
// two server pods, the external host (with the extra address fzVIP), echo servers on
// 80 and 8080 everywhere.
type fzKernel struct {
	h    *kernel.Harness
	node *kernel.Node
	ns   map[string]*kernel.Netns
}

func newFzKernel(t *testing.T, backend kernel.Backend) *fzKernel {
	t.Helper()
	h, err := kernel.NewHarness(kernel.HarnessConfig{Prefix: "clfz", Topology: kernel.TopologyRouted, Backend: backend,
		Pods:          []kernel.PodConfig{{Name: "client"}, {Name: "srv1"}, {Name: "srv2"}},
		PodPorts:      []uint16{80, 8080},
		ExternalAddrs: []netip.Addr{fzVIP}, ExternalRoutes: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		Timeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("harness close: %v", err)
		}
	})
	k := &fzKernel{h: h, node: h.Nodes[0], ns: map[string]*kernel.Netns{"client": h.Pod("client").Netns, "external": h.External, "node": h.Nodes[0].Netns}}
	// The harness must be the topology the emulator side assumes.
	got := map[string]netip.Addr{"client": h.Pod("client").IP, "srv1": h.Pod("srv1").IP, "srv2": h.Pod("srv2").IP,
		"node": k.node.IP, "gateway": k.node.Gateway, "external": h.ExternalIP}
	want := map[string]netip.Addr{"client": fzClient, "srv1": fzSrv1, "srv2": fzSrv2, "node": fzNode, "gateway": fzGateway, "external": fzExt}
	for n, a := range want {
		if got[n] != a {
			t.Fatalf("harness: %s is %v, the fuzzer's topology has %v", n, got[n], a)
		}
	}
	for i, p := range []string{"client", "srv1", "srv2"} {
		if v := h.Pod(p).HostVeth; v != "veth"+strconv.Itoa(i) {
			t.Fatalf("harness: %s's veth is %s, the fuzzer's topology has veth%d", p, v, i)
		}
	}
	local, err := h.LocalAddrs(k.node.Netns)
	if err != nil {
		t.Fatal(err)
	}
	local = slices.DeleteFunc(local, func(a netip.Addr) bool { return !a.Is4() })
	if !slices.Equal(local, fzNodeLocal) {
		t.Fatalf("harness: the node's addresses are %v, the fuzzer's topology has %v", local, fzNodeLocal)
	}
	links, err := h.Exec(context.Background(), k.node.Netns, "ip", "-o", "link", "show", "dev", "eth0")
	if err != nil || !strings.HasPrefix(string(links), "2: eth0") {
		t.Fatalf("harness: the node's eth0 is not ifindex 2 (%q, %v): the masquerade address over lo would differ", links, err)
	}
	for _, port := range []uint16{80, 8080} {
		for _, a := range []netip.Addr{fzNode, fzGateway} {
			if err := h.Serve(k.node.Netns, "node", netip.AddrPortFrom(a, port)); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range []netip.Addr{fzExt, fzVIP} {
			if err := h.Serve(h.External, "external", netip.AddrPortFrom(a, port)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return k
}

// run loads the ruleset into the node, empties its conntrack table and sends the
// packet. A timeout is tried once more when the prediction is not one (an answer late
// on a loaded machine).
func (k *fzKernel) run(ctx context.Context, ruleset string, p fzPacket, predicted string) (string, error) {
	if err := k.node.IPTables.Restore(ctx, []byte(ruleset), kp.RestoreOptions{}); err != nil {
		return "", err
	}
	var obs string
	for try := 0; try < 2; try++ {
		if err := k.node.Conntrack.Flush(ctx); err != nil {
			return "", err
		}
		obs = fzObserved(k.h.DialFrom(k.ns[p.From], p.Proto, p.Src, p.Dst))
		if obs != "timeout" || predicted == "timeout" {
			break
		}
	}
	return obs, nil
}

// fzObserved is what the client saw, in fzExpect's words.
func fzObserved(r kernel.Result) string {
	switch r.Outcome {
	case kernel.Answered:
		return "answered " + r.Server + " from " + r.Source.Addr().String()
	case kernel.Refused:
		return "refused"
	case kernel.TimedOut:
		return "timeout"
	case kernel.Unreachable:
		return "unreachable"
	}
	if errors.Is(r.Err, syscall.EPERM) {
		return "eperm"
	}
	var errno syscall.Errno
	if errors.As(r.Err, &errno) {
		return "failed " + fzErrnoName(errno)
	}
	return "failed (" + fmt.Sprint(r.Err) + ")"
}

func fzErrnoName(e syscall.Errno) string {
	switch e {
	case syscall.ENOPROTOOPT:
		return "ENOPROTOOPT"
	case syscall.EINVAL:
		return "EINVAL"
	}
	return fmt.Sprintf("errno %d (%v)", int(e), e)
}

// TestKernelDiffFuzz is the differential fuzzer: rapid draws a small ruleset (filter
// and nat, user chains, addresses with prefixes and !, tcp/udp ports and multiport,
// addrtype, mark and MARK, comment, conntrack states, ACCEPT, DROP, RETURN, jumps and
// gotos, DNAT, SNAT, MASQUERADE, REJECT of every type, policies) and a packet (a TCP
// SYN or a UDP datagram from the client pod, the external host or the node), loads
// the ruleset into a real node namespace and into the emulator, sends the packet for
// real, and holds what the client saw (which namespace answered and the source it saw,
// refused, unreachable, timeout, EPERM) to what the emulator's walk predicts. A
// ruleset one side refuses and the other loads is a difference too.
//
// A plain `go test` runs fzDefaultCases cases from the fixed seed (35-45 s on two busy cores);
// CLUSTERLAB_DIFFFUZZ=N runs N from a random seed, printed (-rapid.seed=S replays it).
// rapid shrinks a difference to a minimal case, which is written to
// testdata/difffuzz as a regression case (TestDiffFuzzRegressions replays it) before
// the test fails. The cases already there are replayed through the kernel first.
// Root only (network namespaces, iptables, conntrack); skipped elsewhere.
func TestKernelDiffFuzz(t *testing.T) {
	kernel.RequireHarness(t)
	backend := kernel.Backend(os.Getenv("CLUSTERLAB_DIFFFUZZ_BACKEND"))
	if backend == "" {
		backend = kernel.BackendNFT
	}
	kernel.RequireTools(t, "iptables-"+string(backend)+"-restore", "conntrack")
	k := newFzKernel(t, backend)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()

	ok := t.Run("regressions", func(t *testing.T) {
		for f, c := range loadFzCases(t) {
			if c.Backend != "" && c.Backend != string(backend) {
				t.Logf("%s: for the %s backend only", f, c.Backend)
				continue
			}
			pred := c.Emulator
			if c.Expect == "same" {
				pred = c.Kernel
			}
			got, err := k.run(ctx, c.Ruleset, c.Packet, pred)
			if err != nil {
				got = "load error"
			}
			if got != c.Kernel {
				t.Errorf("%s: %s: the kernel shows %q, the case recorded %q", f, c.Packet, got, c.Kernel)
			}
		}
	})
	if !ok {
		t.Fatal("the regression cases do not hold on this kernel: no fuzzing until they do")
	}

	cases, random := fzDefaultCases, false
	if s := os.Getenv("CLUSTERLAB_DIFFFUZZ"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CLUSTERLAB_DIFFFUZZ=%q: want a number of cases", s)
		}
		cases, random = n, true
	}
	if !flagSet("rapid.checks") {
		defer setFlag(t, "rapid.checks", strconv.Itoa(cases))()
	}
	if random && !flagSet("rapid.seed") {
		seed := rand.Uint64()
		defer setFlag(t, "rapid.seed", strconv.FormatUint(seed, 10))()
		t.Logf("differential fuzzer: %d cases from seed %d (replay: -rapid.seed=%d)", cases, seed, seed)
	}

	var lastFail *fzCase
	t.Cleanup(func() {
		if lastFail == nil {
			return
		}
		sum := sha256.Sum256(append([]byte(lastFail.Packet.String()), lastFail.Ruleset...))
		name := filepath.Join(fzCaseDir, fmt.Sprintf("%x.case", sum[:6]))
		lastFail.Comment = append([]string{"Found by TestKernelDiffFuzz (" + string(backend) + " backend) on " + time.Now().UTC().Format("2006-01-02") + "."},
			"Fix the emulator (then this case must pass as it is), or, for a difference",
			"that is not a bug or too large to fix now, set expect to \"differ: WHY\".")
		if err := os.MkdirAll(fzCaseDir, 0o755); err == nil {
			err = os.WriteFile(name, lastFail.Format(), 0o644)
			if err == nil {
				t.Errorf("the shrunk case is written to %s:\n%s", name, lastFail.Format())
				return
			}
		}
		t.Errorf("the shrunk case (not written: %v):\n%s", name, lastFail.Format())
	})
	start := time.Now()
	n := 0
	seen := map[string]int{} // what the kernel showed, by kind, for the log
	t.Cleanup(func() { t.Logf("kernel observations: %v", seen) })
	rapid.Check(t, func(rt *rapid.T) {
		n++
		p := genFzPacket(rt)
		rs := genFzRuleset(rt, p)
		c := &fzCase{Packet: p, Ruleset: rs, Expect: "same"}
		o, emuErr := fzWalk(rs, p)
		if emuErr != nil {
			c.Emulator = "load error"
		} else {
			c.Emulator = fzExpect(o, p)
		}
		obs, kerr := k.run(ctx, rs, p, c.Emulator)
		if kerr != nil {
			if !kernel.IsRestoreError(kerr) {
				rt.Fatalf("kernel: %v", kerr)
			}
			obs = "load error"
		}
		c.Kernel = obs
		kind := strings.Fields(obs)[0]
		if kind == "answered" && o != nil {
			if o.DNATDestination != nil {
				kind += "/dnat"
			}
			if o.Masqueraded {
				kind += "/snat"
			}
		}
		seen[kind]++
		if obs == "load error" && c.Emulator == "load error" {
			return
		}
		if obs != c.Emulator {
			lastFail = c
			detail := ""
			if kerr != nil {
				detail += "\nkernel: " + kerr.Error()
			}
			if emuErr != nil {
				detail += "\nemulator: " + emuErr.Error()
			} else {
				detail += "\nemulator's path: " + fzPath(o)
			}
			rt.Fatalf("%s: the kernel shows %q, the emulator predicts %q%s\nruleset:\n%s", p, obs, c.Emulator, detail, rs)
		}
	})
	t.Logf("%d cases (with shrinking) in %v", n, time.Since(start).Round(time.Millisecond))
}

// fzPath is the rules an outcome's path matched, for a failure message.
func fzPath(o *Outcome) string {
	var b []string
	for _, r := range o.MatchedRules {
		b = append(b, fmt.Sprintf("%s %s: %s", r.Hook, r.Table, r.Rule))
	}
	return fmt.Sprintf("%s (%s)", strings.Join(b, "; "), o.Packet)
}

// setFlag sets a test flag and returns what restores it.
func setFlag(t *testing.T, name, value string) func() {
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag %s", name)
	}
	old := f.Value.String()
	if err := f.Value.Set(value); err != nil {
		t.Fatal(err)
	}
	return func() { _ = f.Value.Set(old) }
}

// flagSet says whether a flag was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
