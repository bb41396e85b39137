package emulator

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/internal/vmtest"
	"github.com/clusterlab/clusterlab/netfilter"
)

// connHandlingVMCases are issue 25's "IPVS connection handling" differentials, run in
// the same boot as the schedulers (TestSchedulersAgainstKernelVM): a reused client
// tuple under conn_reuse_mode 0 and 1 with expire_nodest_conn 0 and 1, after its real
// server was removed or quiesced (weight 0); graceful termination (a weight-0 server's
// open connections carry on and close through it while new ones go elsewhere);
// expire_quiescent_template with persistence templates; the TCP, TCP FIN and UDP
// timeouts of ipvsadm --set, really waited for in the guest (the model advances its
// clock by as much); and the traffic statistics of ipvsadm -Ln --stats. The connection
// table (-Lnc) is compared after each step: states, which entries exist (templates
// too) and, loosely, their expiry (see connExpiryTolerance).
//
// A reused tuple needs the client to open its port again while its previous
// connection, which it closed first, is in TIME_WAIT: the agent sets SO_REUSEADDR and
// the client namespace's tcp_tw_reuse, which lets the port be used again a second
// after the last segment, so each reuse follows a "sleep 1.5". Where the kernel
// expires an old entry on a packet (a reused tuple rescheduled, a removed server's
// entry with expire_nodest_conn), ip_vs_conn_expire_now only re-arms its timer for the
// current jiffy: the entry goes at the next timer tick, so a listing taken in the same
// instant can still show it, expiring in 0 s (seen once in the VM under load), where
// the model removes it at once; the -Lnc after such a line therefore follows a
// "sleep 0.1", as the one after a delete waits for the expire_nodest_conn work item
// (queued a jiffy later). A SYN the kernel drops
// (the entry of a removed server with expire_nodest_conn=0) shows as a connect timeout
// in the guest and as no destination (drop) in the model.
func connHandlingVMCases() []vmtest.Case {
	var cases []vmtest.Case
	add := func(name string, lines ...string) {
		cases = append(cases, vmtest.Case{Name: name, Kind: vmtest.KindIPVSScript, Script: strings.Join(lines, "\n") + "\n"})
	}
	svc := func(vip, flags string, n int) []string {
		out := []string{fmt.Sprintf("-A -t %s %s", vip, flags)}
		for i := 1; i <= n; i++ {
			out = append(out, fmt.Sprintf("-a -t %s -r 10.1.0.%d:8080 -m -w 1", vip, i))
		}
		return out
	}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}

	// conn_reuse_mode × expire_nodest_conn on a tuple whose server was removed.
	for _, mode := range []int{0, 1} {
		for _, nodest := range []int{0, 1} {
			vip := fmt.Sprintf("10.96.1.%d:80", 1+2*mode+nodest)
			add(fmt.Sprintf("reuse-removed-mode%d-nodest%d", mode, nodest), cat(
				[]string{fmt.Sprintf("sysctl conn_reuse_mode=%d", mode), fmt.Sprintf("sysctl expire_nodest_conn=%d", nodest)},
				svc(vip, "-s rr", 3),
				[]string{
					"conn tcp 10.0.0.1:40001 " + vip + " close", // 10.1.0.3 (the head), TIME_WAIT
					"conn tcp 10.0.0.2:40001 " + vip,            // open
					"-Lnc",
					"-d -t " + vip + " -r 10.1.0.3:8080",
					// expire_nodest_conn=1: the 5.9 work item, queued a jiffy after
					// the delete, flushes the entry
					"sleep 0.1",
					"-Lnc",
					"-Ln",
					"sleep 1.5",
					"conn tcp 10.0.0.1:40001 " + vip + " close", // the reused tuple
					"sleep 0.1", // the old entry goes at the next timer tick (see above)
					"-Lnc",
					"-Ln",
				})...)
		}
	}
	// The same on a quiesced (weight 0) server, which stays AVAILABLE.
	for _, mode := range []int{0, 1} {
		for _, nodest := range []int{0, 1} {
			vip := fmt.Sprintf("10.96.2.%d:80", 1+2*mode+nodest)
			add(fmt.Sprintf("reuse-quiesced-mode%d-nodest%d", mode, nodest), cat(
				[]string{fmt.Sprintf("sysctl conn_reuse_mode=%d", mode), fmt.Sprintf("sysctl expire_nodest_conn=%d", nodest)},
				svc(vip, "-s rr", 3),
				[]string{
					"conn tcp 10.0.0.1:40001 " + vip + " close",
					"conn tcp 10.0.0.2:40001 " + vip + " close",
					"-e -t " + vip + " -r 10.1.0.3:8080 -m -w 0",
					"-Lnc",
					"sleep 1.5",
					"conn tcp 10.0.0.1:40001 " + vip + " close",
					"conn tcp 10.0.0.2:40001 " + vip + " close",
					"sleep 0.1",
					"-Lnc",
					"-Ln",
				})...)
		}
	}

	// Graceful termination: weight 0 keeps the open connection, new ones go elsewhere,
	// and the old one closes through its server.
	vip := "10.96.3.1:80"
	add("graceful-weight0", cat(svc(vip, "-s rr", 2), []string{
		"conn tcp 10.0.0.1:40001 " + vip, // 10.1.0.2
		"conn tcp 10.0.0.2:40001 " + vip, // 10.1.0.1
		"-e -t " + vip + " -r 10.1.0.2:8080 -m -w 0",
		"conn tcp 10.0.0.3:40001 " + vip,
		"conn tcp 10.0.0.4:40001 " + vip + " close",
		"-Ln",
		"-Lnc",
		"conn tcp 10.0.0.1:40001 " + vip + " close", // the open one, still to 10.1.0.2
		"-Ln",
		"-Lnc",
		"-e -t " + vip + " -r 10.1.0.2:8080 -m -w 1",
		"conn tcp 10.0.0.5:40001 " + vip + " close",
		"-Ln",
		"-Lnc",
	})...)

	// expire_quiescent_template: a persistence template keeps sending its client to a
	// weight-0 server until the sysctl is set; then the template is invalid and
	// replaced.
	vip = "10.96.4.1:80"
	add("quiescent-template", cat(svc(vip, "-s rr -p 30", 3), []string{
		"conn tcp 10.0.0.1:40001 " + vip + " close",
		"conn tcp 10.0.0.2:40001 " + vip + " close",
		"-Lnc",
		"-e -t " + vip + " -r 10.1.0.3:8080 -m -w 0",
		"conn tcp 10.0.0.1:40002 " + vip + " close", // template still valid
		"-Lnc",
		"sysctl expire_quiescent_template=1",
		"conn tcp 10.0.0.1:40003 " + vip + " close", // template invalid: rescheduled
		"conn tcp 10.0.0.2:40002 " + vip + " close",
		"-Lnc",
		"-Ln",
		"sleep 2.5",   // the kernel's counters are summed every 2 s (stats.go)
		"-Ln --stats", // templates are not connections
	})...)

	// Timeouts (ipvsadm --set tcp tcpfin udp): an ESTABLISHED entry, one in FIN_WAIT
	// (the real server closed first), a UDP one refreshed by a second datagram, a
	// closed one (TIME_WAIT keeps its 120 s); then the statistics.
	vip = "10.96.5.1:80"
	uvip := "10.96.5.2:53"
	add("timeouts", cat([]string{"--set 3 3 5"}, svc(vip, "-s rr", 2), []string{
		"-A -u " + uvip + " -s rr",
		"-a -u " + uvip + " -r 10.1.0.1:8080 -m -w 1",
		"-a -u " + uvip + " -r 10.1.0.2:8080 -m -w 1",
		"conn tcp 10.0.0.1:40001 " + vip,
		"conn tcp 10.0.0.2:40001 " + vip + " server-close",
		"conn tcp 10.0.0.3:40001 " + vip + " close",
		"conn udp 10.0.0.4:40001 " + uvip,
		"-Lnc",
		"-Ln",
		"sleep 1",
		"-Lnc",                            // t=1: all there
		"conn udp 10.0.0.4:40001 " + uvip, // refreshes the UDP entry: it expires at 6
		"sleep 3",
		"-Lnc", // t=4: the ESTABLISHED and FIN_WAIT entries expired at 3, the UDP one not
		"-Ln",
		"conn udp 10.0.0.5:40001 " + uvip, // expires at 9
		"sleep 3",
		"-Lnc", // t=7: the first UDP entry expired
		"-Ln",
		"conn udp 10.0.0.4:40001 " + uvip, // a new entry, scheduled afresh; expires at 12
		"sleep 3",
		"-Lnc", // t=10
		"-Ln --stats",
	})...)

	// Statistics with more traffic: UDP to three servers, one removed and re-added
	// (a real server in the trash keeps its counters), TCP connections counted.
	uvip = "10.96.6.1:53"
	st := []string{"sysctl expire_nodest_conn=1", "-A -u " + uvip + " -s wrr"}
	for i := 1; i <= 3; i++ {
		st = append(st, fmt.Sprintf("-a -u %s -r 10.1.0.%d:8080 -m -w %d", uvip, i, i))
	}
	for i := 1; i <= 8; i++ {
		st = append(st, fmt.Sprintf("conn udp 10.0.0.%d:40001 %s", 1+i%3, uvip))
		if i == 4 {
			st = append(st, "-d -u "+uvip+" -r 10.1.0.2:8080", "sleep 0.1")
		}
	}
	st = append(st, "-a -u "+uvip+" -r 10.1.0.2:8080 -m -w 2", "conn udp 10.0.0.9:40001 "+uvip)
	vip = "10.96.6.2:80"
	st = append(st, svc(vip, "-s wlc", 2)...)
	for i := 1; i <= 5; i++ {
		close := ""
		if i%2 == 0 {
			close = " close"
		}
		st = append(st, fmt.Sprintf("conn tcp 10.0.0.%d:40002 %s%s", i, vip, close))
	}
	st = append(st, "sleep 3", "-Ln --stats", "-Lnc")
	add("stats", st...)
	return cases
}

// expiryBounds is the range of the kernel's expiry column (whole seconds, truncated)
// for an entry the model shows expiring in model seconds, the model's clock following
// the guest's line by line (compareWithKernel) and the guest's slowest line so far
// taking slack: the kernel's entry may be that much older (its last packet went
// earlier in the line than the model plays it), plus the truncation's second and the
// timer wheel's slack; it may not outlive the model's by more than the truncation's
// second.
func expiryBounds(model int, slack time.Duration) (lo, hi int) {
	return model - int(math.Ceil(max(slack, 0).Seconds())) - 1, model + 1
}

// connLinesExpiry is connLines with each line's expiry in seconds (the model's mm:ss
// column), in the same order.
func connLinesExpiry(listing string) ([]string, []int) {
	type entry struct {
		line string
		exp  int
	}
	var es []entry
	for _, l := range strings.Split(listing, "\n") {
		f := strings.Fields(l)
		if len(f) != 6 || f[0] == "pro" {
			continue
		}
		var mm, ss int
		if _, err := fmt.Sscanf(f[1], "%d:%d", &mm, &ss); err != nil {
			panic(fmt.Sprintf("model -Lnc expiry %q: %v", f[1], err))
		}
		es = append(es, entry{strings.Join([]string{f[0], f[2], f[3], f[4], f[5]}, " "), mm*60 + ss})
	}
	slices.SortStableFunc(es, func(a, b entry) int { return strings.Compare(a.line, b.line) })
	lines, exps := []string{}, []int{}
	for _, e := range es {
		lines, exps = append(lines, e.line), append(exps, e.exp)
	}
	return lines, exps
}

// modelStats is the model's ipvsadm -Ln --stats in the agent's form.
func modelStats(m *Model) []vmtest.ServiceStats {
	conv := func(t TrafficStats) vmtest.TrafficStats {
		return vmtest.TrafficStats{Conns: t.Conns, InPkts: t.InPkts, OutPkts: t.OutPkts, InBytes: t.InBytes, OutBytes: t.OutBytes}
	}
	out := []vmtest.ServiceStats{}
	for _, s := range m.Traffic() {
		ss := vmtest.ServiceStats{Service: s.Service, Stats: conv(s.Stats), Destinations: []vmtest.DestStats{}}
		for _, d := range s.Destinations {
			ss.Destinations = append(ss.Destinations, vmtest.DestStats{Destination: d.Destination, Stats: conv(d.Stats)})
		}
		out = append(out, ss)
	}
	return out
}

// comparableStats sorts the services by label and keeps, for TCP services, only the
// connection counts: a conn line's TCP packets on the kernel are a real stack's
// (handshake, the request and reply segments, acknowledgements, the close), which the
// model does not play (it plays the handshake and the close without payload). On
// Debian's 6.1 the kernel counted, per connection left open, 4 packets in (SYN 60
// bytes, ACK 52, the request 116, the ACK of the reply 52: 280 bytes) and 3 out
// (SYN-ACK 60, a bare ACK of the request 52, the reply 116: 228 bytes); a closed one 6
// in (384 bytes) and 4 out (280 bytes); a server-close one 5 in and 4 out. The bare
// ACK is the server's quick-ACK racing its application's reply: had the reply gone
// first it would have carried the ACK, one packet fewer; when a stack acknowledges is
// its own business, not IPVS's, so these counts are not the model's to predict. A UDP
// conn line is one request and one reply of ConnPayload bytes on both sides (92-byte
// IPv4 packets), so every UDP counter is compared.
func comparableStats(in []vmtest.ServiceStats) []vmtest.ServiceStats {
	out := []vmtest.ServiceStats{}
	for _, s := range in {
		s.Destinations = slices.Clone(s.Destinations)
		if strings.HasPrefix(s.Service, "TCP ") {
			s.Stats = vmtest.TrafficStats{Conns: s.Stats.Conns}
			for i := range s.Destinations {
				s.Destinations[i].Stats = vmtest.TrafficStats{Conns: s.Destinations[i].Stats.Conns}
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b vmtest.ServiceStats) int { return strings.Compare(a.Service, b.Service) })
	return out
}

// kernelRecord is a VM run's results kept in testdata, so that the model is held to
// a real kernel's answers without a VM (TestConnHandlingKernelRecord).
type kernelRecord struct {
	Release string                     `json:"release"`
	Scripts map[string]string          `json:"scripts"`
	Results map[string][]vmtest.Result `json:"results"`
}

const kernelRecordFile = "testdata/kernel/conn-handling.json"

// recordKernel writes the kernel's results of cases to kernelRecordFile
// (CLUSTERLAB_VM_RECORD=1 go test -run TestSchedulersAgainstKernelVM).
func recordKernel(t *testing.T, b *vmtest.Boot, cases []vmtest.Case) {
	if t.Failed() {
		t.Logf("not recording %s: the run disagreed with the model", kernelRecordFile)
		return
	}
	rec := kernelRecord{Release: b.Booted.Release, Scripts: map[string]string{}, Results: map[string][]vmtest.Result{}}
	for _, c := range cases {
		rec.Scripts[c.Name] = c.Script
		rec.Results[c.Name] = b.CaseResults(c.Name)
	}
	data, err := json.MarshalIndent(rec, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(kernelRecordFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kernelRecordFile, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded the kernel's results of %d cases in %s", len(cases), kernelRecordFile)
}

// TestConnHandlingKernelRecord replays connHandlingVMCases on the model against the
// answers Debian's 6.1 kernel gave in the VM (recorded by TestSchedulersAgainstKernelVM
// with CLUSTERLAB_VM_RECORD=1): picks, listings, connection tables with their expiry,
// traffic statistics, compared exactly as the VM test compares them. It needs no VM,
// so every run of the package holds the model to the kernel's connection handling.
func TestConnHandlingKernelRecord(t *testing.T) {
	data, err := os.ReadFile(kernelRecordFile)
	if err != nil {
		t.Fatal(err)
	}
	var rec kernelRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatalf("%s: %v", kernelRecordFile, err)
	}
	kv, err := netfilter.ParseKernelVersion(rec.Release)
	if err != nil {
		t.Fatal(err)
	}
	cases := connHandlingVMCases()
	if len(rec.Results) != len(cases) {
		t.Errorf("%s holds %d cases, connHandlingVMCases has %d: record it again (CLUSTERLAB_VM_RECORD=1 on a machine that runs the VM)",
			kernelRecordFile, len(rec.Results), len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if rec.Scripts[c.Name] != c.Script {
				t.Fatalf("the case's script changed since %s was recorded: record it again (CLUSTERLAB_VM_RECORD=1 on a machine that runs the VM)", kernelRecordFile)
			}
			compareWithKernel(t, kv, lacksOverloadUpdate(rec.Release), c, rec.Results[c.Name])
		})
	}
}
