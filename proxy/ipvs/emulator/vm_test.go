package emulator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/clusterlab/clusterlab/internal/vmtest"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// TestSchedulersAgainstKernelVM is the first differential of the model against a real
// IPVS: Debian's kernel booted in a VM (package internal/vmtest; the host kernel has no
// IPVS). For every scheduler the guest kernel has, the same script runs on both: a
// virtual server with weighted real servers, real TCP connections from several client
// addresses (some left open, some closed, so active and inactive counts differ), then a
// server quiesced (weight 0), one deleted while it still has connections and re-added,
// weights changed and an upper threshold (-x) reached; a persistent service; UDP; sh
// and mh with their port and fallback flags. Each connection's real server (the one
// that answered on the kernel) must be the model's pick, each ipvsadm command must be
// accepted or refused alike, and each -Ln listing (real servers in kernel list order
// with weights and active/inactive counts) must be the model's.
//
// The same boot runs the connection-handling cases of connHandlingVMCases (reused
// tuples, graceful termination, quiescent templates, timeouts, statistics), so the
// suite stays one boot: 32 cases, whose guest time is about 10 s for the schedulers
// and 36 s for connection handling at light load (29 s of it sleeps the timeouts and
// the kernel's 2 s statistics estimator need, 5 s a connect the kernel drops); the
// test took 56-82 s at load 4-6 and 76-114 s at load 8-10 on the 2-core CI machine
// (docs/PERFORMANCE.md). With CLUSTERLAB_VM_RECORD=1 a run that agrees writes the
// kernel's connection-handling answers to testdata/kernel for
// TestConnHandlingKernelRecord.
func TestSchedulersAgainstKernelVM(t *testing.T) {
	k := vmtest.Require(t)
	var plan vmtest.Plan
	for _, s := range ipvs.Schedulers() {
		if !k.HasModule("ip_vs_" + s) {
			t.Logf("scheduler %s: kernel %s has no ip_vs_%s module; not compared", s, k.Release, s)
			continue
		}
		plan.Cases = append(plan.Cases, vmtest.Case{Name: s, Kind: vmtest.KindIPVSScript, Script: schedulerScript(s)})
	}
	plan.Cases = append(plan.Cases, extraVMCases()...)
	plan.Cases = append(plan.Cases, connHandlingVMCases()...)
	b, err := vmtest.Run(context.Background(), k, plan, vmtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel %s: %d cases in one boot of %v", b.Booted.Release, len(plan.Cases), b.Elapsed.Round(1e8))
	if b.Retried != "" {
		t.Logf("booted twice: the first kernel died before the agent ran:\n%s", b.Retried)
	}
	kv, err := netfilter.ParseKernelVersion(b.Booted.Release)
	if err != nil {
		t.Fatal(err)
	}
	legacy := lacksOverloadUpdate(b.Booted.Release)
	if legacy {
		t.Logf("kernel %s predates the dest overload fix: the model runs with LegacyThresholdEdit", b.Booted.Release)
	}
	for _, c := range plan.Cases {
		t.Run(c.Name, func(t *testing.T) { compareWithKernel(t, kv, legacy, c, b.CaseResults(c.Name)) })
	}
	if os.Getenv("CLUSTERLAB_VM_RECORD") != "" {
		recordKernel(t, b, connHandlingVMCases())
	}
}

// compareWithKernel replays the case's script on a model line by line and holds each
// line's outcome to the kernel's.
// lacksOverloadUpdate reports whether a Debian 6.1 kernel release ("6.1.0-48-amd64")
// predates the stable fix that makes an edit of a real server recompute OVERLOAD
// (Config.LegacyThresholdEdit): the VM differential found 6.1.0-48 without it and
// 6.1.0-56 with it; the ABI numbers between are taken as without it until a run shows
// otherwise. Other releases are taken as having it.
func lacksOverloadUpdate(release string) bool {
	rest, ok := strings.CutPrefix(release, "6.1.0-")
	if !ok {
		return false
	}
	abi, _, _ := strings.Cut(rest, "-")
	n, err := strconv.Atoi(abi)
	return err == nil && n < 56
}

func compareWithKernel(t *testing.T, kv netfilter.KernelVersion, legacyEdit bool, c vmtest.Case, got []vmtest.Result) {
	if len(got) == 0 || !got[len(got)-1].Done {
		t.Fatalf("no end result from the guest: %+v", got)
	}
	done := got[len(got)-1]
	if done.Fatal != "" {
		t.Fatalf("the guest stopped the case: %s", done.Fatal)
	}
	if len(done.Leftover) > 0 {
		t.Errorf("left behind in the guest: %q", done.Leftover)
	}
	t.Logf("guest time %s", done.Elapsed)
	// The model runs on the clock its sleep lines advance (the guest really sleeps).
	clock := NewManualClock()
	m, err := New(Config{Kernel: kv, Clock: clock, LegacyThresholdEdit: legacyEdit})
	if err != nil {
		t.Fatal(err)
	}
	// The model's clock follows the guest's: before each line it is moved to the time
	// the guest finished that line (Result.AtMS), so timers run on both over the same
	// real time whatever the emulation cost (a TCG guest under load oversleeps and
	// connects slowly); a sleep line advances it by the sleep, which the guest's
	// really took at least. A conn line runs on the model at its end, when the guest
	// sent its last packets; its first ones went earlier, by at most the line's
	// duration, which bounds how much older the kernel's entry may be (slack).
	start := clock.Now()
	var slack time.Duration
	prevAt := int64(0)
	picks, mismatches, listings := 0, 0, 0
	for _, r := range got[:len(got)-1] {
		if !strings.HasPrefix(r.Text, "sleep ") {
			if at := start.Add(time.Duration(r.AtMS) * time.Millisecond); at.After(clock.Now()) {
				clock.Advance(at.Sub(clock.Now()))
			}
			slack = max(slack, time.Duration(r.AtMS-prevAt)*time.Millisecond)
		}
		prevAt = r.AtMS
		rep, err := m.Run([]byte(r.Text), c.Name, clock)
		where := fmt.Sprintf("line %d %q", r.Line, r.Text)
		switch {
		case strings.HasPrefix(r.Text, "conn "):
			if err != nil {
				t.Fatalf("%s: model: %v", where, err)
			}
			mr := rep.Results[0]
			picks++
			if mr.NoDestination != r.NoDestination || mr.Destination != r.Destination {
				mismatches++
				t.Errorf("%s: kernel %s, model %s", where, pickText(r.Destination, r.NoDestination, r.Err), pickText(mr.Destination, mr.NoDestination, mr.Reason))
			}
			if !r.NoDestination && r.Err != "" {
				t.Errorf("%s: kernel connection failed: %s", where, r.Err)
			}
		case r.ConnsListed:
			listings++
			if err != nil {
				t.Fatalf("%s: model: %v", where, err)
			}
			want, wantExp := connLinesExpiry(rep.Listings[0].Output)
			if d := cmp.Diff(want, r.Conns); d != "" {
				t.Errorf("%s: connection table (-model +kernel, ipvsadm -Lnc without the expiry):\n%s", where, d)
			} else if len(r.ConnExpires) == len(want) {
				for i := range want {
					if lo, hi := expiryBounds(wantExp[i], slack); r.ConnExpires[i] < lo || r.ConnExpires[i] > hi {
						t.Errorf("%s: %s expires in %d s on the kernel, %d s on the model (a line took up to %v in the guest; want %d to %d)",
							where, want[i], r.ConnExpires[i], wantExp[i], slack.Round(time.Millisecond), lo, hi)
					}
				}
			}
		case r.StatsListed:
			listings++
			if err != nil {
				t.Fatalf("%s: model: %v", where, err)
			}
			if d := cmp.Diff(comparableStats(modelStats(m)), comparableStats(r.Stats)); d != "" {
				t.Errorf("%s: traffic statistics (-model +kernel; TCP packets and bytes not compared):\n%s", where, d)
			}
		case r.Listed:
			listings++
			if err != nil {
				t.Fatalf("%s: model: %v", where, err)
			}
			want, err := vmtest.Listing(m)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(withoutPersistCounts(want), withoutPersistCounts(r.Listing)); d != "" {
				t.Errorf("%s: listing (-model +kernel):\n%s", where, d)
			}
		default:
			if class := vmtest.ErrClass(err); class != r.ErrClass {
				t.Errorf("%s: kernel error %q (%s), model %q (%v)", where, r.ErrClass, r.Err, class, err)
			}
		}
	}
	if picks == 0 || listings == 0 {
		t.Errorf("the case compared %d picks and %d listings; want some of each", picks, listings)
	}
	t.Logf("%d picks (%d differ), %d listings; the guest took %v in all, its slowest line %v",
		picks, mismatches, listings, time.Duration(prevAt)*time.Millisecond, slack.Round(time.Millisecond))
}

func pickText(dest string, none bool, why string) string {
	if none {
		return "no destination (" + why + ")"
	}
	return dest
}

// withoutPersistCounts drops the persistent-connection counts: the kernel adapter's
// library (moby/ipvs) does not read them, so the kernel side is always 0.
func withoutPersistCounts(l []vmtest.Service) []vmtest.Service {
	out := []vmtest.Service{}
	for _, s := range l {
		s.Destinations = append([]vmtest.RealServer{}, s.Destinations...)
		for i := range s.Destinations {
			s.Destinations[i].PersistConn = 0
		}
		out = append(out, s)
	}
	return out
}

// scriptWriter writes a script with connections from a fixed pool of clients, each
// connection from a client port not used before in the script.
type scriptWriter struct {
	b     strings.Builder
	rng   *rand.Rand
	port  map[string]int
	proto string
	vip   string
}

func newScriptWriter(seed uint64, proto, vip string) *scriptWriter {
	return &scriptWriter{rng: rand.New(rand.NewPCG(seed, 25)), port: map[string]int{}, proto: proto, vip: vip}
}

func (w *scriptWriter) line(format string, args ...any) { fmt.Fprintf(&w.b, format+"\n", args...) }

// conns writes n connections from the first nClients clients; with TCP about a third
// are closed (inactive entries), the rest stay open (active).
func (w *scriptWriter) conns(n, nClients int) {
	for range n {
		client := fmt.Sprintf("10.0.%d.%d", w.rng.IntN(2), 1+w.rng.IntN(nClients))
		w.port[client]++
		close := ""
		if w.proto == "tcp" && w.rng.IntN(3) == 0 {
			close = " close"
		}
		w.line("conn %s %s:%d %s%s", w.proto, client, 40000+w.port[client], w.vip, close)
	}
}

// schedulerScript is the per-scheduler sequence: weights 3, 2, 1, 1 (list order is the
// reverse), connections, a quiesced server, a deleted and re-added one, changed weights,
// an upper threshold reached, listings between.
func schedulerScript(sched string) string {
	vip := "10.96.0.1:80"
	w := newScriptWriter(uint64(len(sched))*1000+uint64(sched[0]), "tcp", vip)
	w.line("# %s", sched)
	w.line("-A -t %s -s %s", vip, sched)
	for i, wt := range []int{3, 2, 1, 1} {
		w.line("-a -t %s -r 10.1.0.%d:8080 -m -w %d", vip, i+1, wt)
	}
	w.conns(12, 6)
	w.line("-Ln")
	w.line("-e -t %s -r 10.1.0.2:8080 -m -w 0", vip)
	w.conns(6, 6)
	w.line("-d -t %s -r 10.1.0.3:8080", vip)
	w.conns(5, 6)
	w.line("-Ln")
	w.line("-a -t %s -r 10.1.0.3:8080 -m -w 4", vip)
	w.line("-e -t %s -r 10.1.0.2:8080 -m -w 2", vip)
	w.conns(8, 8)
	w.line("-e -t %s -r 10.1.0.1:8080 -m -w 3 -x 4", vip)
	w.conns(8, 8)
	w.line("-Ln")
	w.line("-Lnc")
	w.line("-a -t %s -r 10.1.0.3:8080 -m -w 1", vip) // already there: refused
	w.line("-d -t %s -r 10.1.0.9:8080", vip)         // not there: refused
	return w.b.String()
}

// extraVMCases: persistence (ClientIP affinity as kube-proxy sets it, and a /24
// netmask), UDP, and the flags of the hashing schedulers.
func extraVMCases() []vmtest.Case {
	var cases []vmtest.Case
	add := func(name string, w *scriptWriter) {
		cases = append(cases, vmtest.Case{Name: name, Kind: vmtest.KindIPVSScript, Script: w.b.String()})
	}
	servers := func(w *scriptWriter, flag string, n int) {
		for i := 1; i <= n; i++ {
			w.line("-a %s %s -r 10.1.0.%d:8080 -m -w %d", flag, w.vip, i, 1+i%2)
		}
	}

	w := newScriptWriter(1, "tcp", "10.96.0.2:80")
	w.line("-A -t %s -s rr -p 60", w.vip)
	servers(w, "-t", 3)
	w.conns(10, 3)
	w.line("-e -t %s -r 10.1.0.1:8080 -m -w 0", w.vip) // the template still sends its client there
	w.conns(6, 4)
	w.line("-Ln")
	w.line("-Lnc")
	add("rr-persistent", w)

	w = newScriptWriter(2, "tcp", "10.96.0.3:80")
	w.line("-A -t %s -s wlc -p 300 -M 255.255.255.0", w.vip)
	servers(w, "-t", 3)
	w.conns(10, 6)
	w.line("-Ln")
	add("wlc-persistent-netmask", w)

	w = newScriptWriter(3, "udp", "10.96.0.4:53")
	w.line("-A -u %s -s rr", w.vip)
	servers(w, "-u", 3)
	w.conns(8, 4)
	w.line("-d -u %s -r 10.1.0.2:8080", w.vip)
	w.conns(4, 4)
	w.line("-Ln")
	w.line("-Lnc")
	add("udp-rr", w)

	w = newScriptWriter(4, "udp", "10.96.0.5:53")
	w.line("-A -u %s -s wlc", w.vip)
	servers(w, "-u", 3)
	w.conns(8, 4)
	w.line("-Ln")
	add("udp-wlc", w)

	w = newScriptWriter(5, "tcp", "10.96.0.6:80")
	w.line("-A -t %s -s sh -b sh-port,sh-fallback", w.vip)
	servers(w, "-t", 4)
	w.conns(8, 3)
	w.line("-e -t %s -r 10.1.0.2:8080 -m -w 0", w.vip)
	w.conns(8, 3)
	w.line("-Ln")
	add("sh-port-fallback", w)

	w = newScriptWriter(6, "tcp", "10.96.0.7:80")
	w.line("-A -t %s -s mh -b mh-port,mh-fallback", w.vip)
	servers(w, "-t", 4)
	w.conns(8, 3)
	w.line("-e -t %s -r 10.1.0.3:8080 -m -w 0", w.vip)
	w.conns(8, 3)
	w.line("-Ln")
	add("mh-port-fallback", w)

	w = newScriptWriter(7, "tcp", "10.96.0.8:80")
	w.line("-A -t %s -s lblc", w.vip)
	servers(w, "-t", 3)
	w.line("-e -t %s -r 10.1.0.1:8080 -m -w 1 -x 2 -y 1", w.vip)
	w.conns(10, 6)
	w.line("-Ln")
	add("lblc-thresholds", w)
	return cases
}

// connLines turns the model's ipvsadm -Lnc listing into the agent's sorted
// "PROTO STATE CLIENT VIRTUAL DESTINATION" lines (the expiry column dropped).
func connLines(listing string) []string {
	out := []string{}
	for _, l := range strings.Split(listing, "\n") {
		f := strings.Fields(l)
		if len(f) != 6 || f[0] == "pro" {
			continue
		}
		out = append(out, strings.Join([]string{f[0], f[2], f[3], f[4], f[5]}, " "))
	}
	slices.Sort(out)
	return out
}
