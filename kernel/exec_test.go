package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// fakeRunner records every command and answers from a script keyed by the command line.
// Unscripted commands succeed with empty output.
type fakeRunner struct {
	mu      sync.Mutex
	calls   []string // command lines
	stdins  []string
	answers map[string]result
}

func newFake() *fakeRunner { return &fakeRunner{answers: map[string]result{}} }

func (f *fakeRunner) on(cmdline string, code int, stdout, stderr string) {
	r := result{stdout: []byte(stdout), stderr: []byte(stderr), exitCode: code}
	if code != 0 {
		r.err = fmt.Errorf("exit status %d", code)
	}
	f.answers[cmdline] = r
}

func (f *fakeRunner) run(_ context.Context, c command) result {
	f.mu.Lock()
	defer f.mu.Unlock()
	line := strings.Join(c.argv, " ")
	f.calls = append(f.calls, line)
	f.stdins = append(f.stdins, string(c.stdin))
	if r, ok := f.answers[line]; ok {
		return r
	}
	return result{}
}

func (f *fakeRunner) reset() {
	f.calls, f.stdins = nil, nil
}

const nftVersion = "iptables v1.8.9 (nf_tables)\n"

func newFakeIPTables(t *testing.T, f *fakeRunner, opts IPTablesOptions, version string) *IPTables {
	t.Helper()
	tool := toolName(IPv4, opts.Backend, "")
	if opts.Family == IPv6 {
		tool = toolName(IPv6, opts.Backend, "")
	}
	f.on(strings.Join(inNetnsArgv(opts.Netns, []string{tool, "--version"}), " "), 0, version, "")
	ipt, err := newIPTables(context.Background(), opts, f)
	if err != nil {
		t.Fatal(err)
	}
	f.reset()
	return ipt
}

func TestIPTablesCommandLines(t *testing.T) {
	ctx := context.Background()
	data := []byte("*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n")
	cases := []struct {
		name    string
		opts    IPTablesOptions
		version string
		ropts   iptables.RestoreOptions
		restore string
		save    string // Save("nat")
		check   string // the -C of EnsureRule
	}{
		{"nft in netns", IPTablesOptions{Backend: BackendNFT, Netns: "n1"}, nftVersion, iptables.RestoreOptions{NoFlush: true, Counters: true},
			"ip netns exec n1 iptables-nft-restore -w 5 --noflush --counters",
			"ip netns exec n1 iptables-nft-save -t nat",
			"ip netns exec n1 iptables-nft -w 5 -t nat -C PREROUTING -m comment --comment kubernetes service portals -j KUBE-SERVICES"},
		{"legacy", IPTablesOptions{Backend: BackendLegacy, Netns: HostNamespace}, "iptables v1.8.9 (legacy)\n", iptables.RestoreOptions{NoFlush: true},
			"iptables-legacy-restore -w 5 -W 100000 --noflush",
			"iptables-legacy-save -t nat",
			"iptables-legacy -w 5 -W 100000 -t nat -C PREROUTING -m comment --comment kubernetes service portals -j KUBE-SERVICES"},
		{"ipv6 wait 10", IPTablesOptions{Backend: BackendNFT, Family: IPv6, WaitSeconds: 10, Netns: HostNamespace}, "ip6tables v1.8.9 (nf_tables)\n", iptables.RestoreOptions{},
			"ip6tables-nft-restore -w 10",
			"ip6tables-nft-save -t nat",
			"ip6tables-nft -w 10 -t nat -C PREROUTING -m comment --comment kubernetes service portals -j KUBE-SERVICES"},
		{"1.6.1: restore has no -w", IPTablesOptions{Backend: BackendLegacy, Netns: HostNamespace}, "iptables v1.6.1\n", iptables.RestoreOptions{NoFlush: true},
			"iptables-legacy-restore --noflush",
			"iptables-legacy-save -t nat",
			"iptables-legacy -w 5 -W 100000 -t nat -C PREROUTING -m comment --comment kubernetes service portals -j KUBE-SERVICES"},
		{"1.4.21: bare -w", IPTablesOptions{Backend: BackendLegacy, Netns: HostNamespace}, "iptables v1.4.21\n", iptables.RestoreOptions{NoFlush: true},
			"iptables-legacy-restore --noflush",
			"iptables-legacy-save -t nat",
			"iptables-legacy -w -t nat -C PREROUTING -m comment --comment kubernetes service portals -j KUBE-SERVICES"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			ipt := newFakeIPTables(t, f, tc.opts, tc.version)
			if err := ipt.Restore(ctx, data, tc.ropts); err != nil {
				t.Fatal(err)
			}
			if _, err := ipt.Save(ctx, "nat"); err != nil {
				t.Fatal(err)
			}
			check := strings.Replace(tc.check, "-C", "-I", 1)
			f.on(tc.check, 1, "", "iptables: Bad rule (does a matching rule exist in that chain?).\n")
			existed, err := ipt.EnsureRule(ctx, Prepend, "nat", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES")
			if err != nil || existed {
				t.Fatalf("EnsureRule: %v %v", existed, err)
			}
			want := []string{tc.restore, tc.save, tc.check, check}
			if diff := cmp.Diff(want, f.calls); diff != "" {
				t.Errorf("command lines (-want +got):\n%s", diff)
			}
			if f.stdins[0] != string(data) {
				t.Errorf("restore stdin %q, want %q", f.stdins[0], data)
			}
		})
	}
}

func TestIPTablesSaveTables(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	ipt := newFakeIPTables(t, f, IPTablesOptions{Backend: BackendNFT, Netns: HostNamespace}, nftVersion)
	f.on("iptables-nft-save -t filter", 0, "*filter\nCOMMIT\n", "")
	f.on("iptables-nft-save -t nat", 0, "*nat\nCOMMIT\n", "")
	got, err := ipt.Save(ctx, "filter", "nat")
	if err != nil || string(got) != "*filter\nCOMMIT\n*nat\nCOMMIT\n" {
		t.Errorf("Save(filter, nat) = %q, %v", got, err)
	}
	f.on("iptables-nft-save", 0, "*all\n", "")
	if got, err := ipt.Save(ctx); err != nil || string(got) != "*all\n" {
		t.Errorf("Save() = %q, %v", got, err)
	}
	if _, err := ipt.SaveCounters(ctx, "mangle"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"iptables-nft-save -t filter", "iptables-nft-save -t nat", "iptables-nft-save", "iptables-nft-save -c -t mangle"}, f.calls); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	f.on("iptables-nft-save -t raw", 1, "", "iptables-nft-save: Table does not exist\n")
	_, err = ipt.Save(ctx, "raw")
	var ce *CommandError
	if !errors.As(err, &ce) || ce.ExitCode != 1 || !strings.Contains(err.Error(), "Table does not exist") {
		t.Errorf("failing save: %v; want a CommandError with the tool's stderr", err)
	}
	if _, err := ipt.Save(ctx, "-t"); err == nil {
		t.Error("Save(\"-t\"): want an error")
	}
}

func TestIPTablesRuleHelpers(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	ipt := newFakeIPTables(t, f, IPTablesOptions{Backend: BackendNFT, Netns: HostNamespace}, nftVersion)
	// Present: -C succeeds, nothing else runs.
	if existed, err := ipt.EnsureRule(ctx, Append, "filter", "INPUT", "-j", "KUBE-FIREWALL"); err != nil || !existed {
		t.Errorf("EnsureRule present: %v %v", existed, err)
	}
	// A -C failure other than "missing" is an error, and nothing is inserted.
	f.on("iptables-nft -w 5 -t filter -C INPUT -j BAD", 2, "", "iptables v1.8.9 (nf_tables): Couldn't load target `BAD'\n")
	if _, err := ipt.EnsureRule(ctx, Append, "filter", "INPUT", "-j", "BAD"); err == nil || !strings.Contains(err.Error(), "Couldn't load target") {
		t.Errorf("EnsureRule bad target: %v", err)
	}
	// Missing, appended.
	f.on("iptables-nft -w 5 -t filter -C FORWARD -j X", 1, "", "iptables: Bad rule\n")
	if existed, err := ipt.EnsureRule(ctx, Append, "filter", "FORWARD", "-j", "X"); err != nil || existed {
		t.Errorf("EnsureRule missing: %v %v", existed, err)
	}
	f.on("iptables-nft -w 5 -t nat -N KUBE-SERVICES", 1, "", "iptables: Chain already exists.\n")
	if existed, err := ipt.EnsureChain(ctx, "nat", "KUBE-SERVICES"); err != nil || !existed {
		t.Errorf("EnsureChain existing: %v %v", existed, err)
	}
	if existed, err := ipt.EnsureChain(ctx, "nat", "KUBE-NEW"); err != nil || existed {
		t.Errorf("EnsureChain new: %v %v", existed, err)
	}
	f.on("iptables-nft -w 5 -t nat -C OUTPUT -j GONE", 1, "", "")
	if existed, err := ipt.DeleteRule(ctx, "nat", "OUTPUT", "-j", "GONE"); err != nil || existed {
		t.Errorf("DeleteRule absent: %v %v", existed, err)
	}
	if existed, err := ipt.DeleteRule(ctx, "nat", "OUTPUT", "-j", "HERE"); err != nil || !existed {
		t.Errorf("DeleteRule present: %v %v", existed, err)
	}
	want := []string{
		"iptables-nft -w 5 -t filter -C INPUT -j KUBE-FIREWALL",
		"iptables-nft -w 5 -t filter -C INPUT -j BAD",
		"iptables-nft -w 5 -t filter -C FORWARD -j X",
		"iptables-nft -w 5 -t filter -A FORWARD -j X",
		"iptables-nft -w 5 -t nat -N KUBE-SERVICES",
		"iptables-nft -w 5 -t nat -N KUBE-NEW",
		"iptables-nft -w 5 -t nat -C OUTPUT -j GONE",
		"iptables-nft -w 5 -t nat -C OUTPUT -j HERE",
		"iptables-nft -w 5 -t nat -D OUTPUT -j HERE",
	}
	if diff := cmp.Diff(want, f.calls); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := ipt.EnsureRule(ctx, "-X", "nat", "OUTPUT"); err == nil {
		t.Error("EnsureRule with a bad position: want an error")
	}
}

func TestRestoreErrorLine(t *testing.T) {
	input := "*nat\n:FOO - [0:0]\n-A FOO -j ACCEPT\n-A FOO -j NOPE\nCOMMIT\n"
	cases := []struct {
		stderr   string
		wantLine int
		wantText string
	}{
		{"iptables-nft-restore v1.8.9 (nf_tables): Chain 'NOPE' does not exist\nError occurred at line: 4\nTry `iptables-nft-restore -h' or 'iptables-nft-restore --help' for more information.\n", 4, "-A FOO -j NOPE"},
		{"iptables-restore: line 5 failed\n", 5, "COMMIT"},
		{"iptables-restore v1.8.9 (legacy): Couldn't load target `NOPE':No such file or directory\n\nError occurred at line: 4\n", 4, "-A FOO -j NOPE"},
		{"Error occurred at line: 99\n", 99, ""},
		{"something else\n", 0, ""},
	}
	for _, tc := range cases {
		f := newFake()
		ipt := newFakeIPTables(t, f, IPTablesOptions{Backend: BackendNFT, Netns: HostNamespace}, nftVersion)
		f.on("iptables-nft-restore -w 5 --noflush", 2, "", tc.stderr)
		err := ipt.Restore(context.Background(), []byte(input), iptables.RestoreOptions{NoFlush: true})
		var re *RestoreError
		if !errors.As(err, &re) {
			t.Fatalf("stderr %q: got %v, want a *RestoreError", tc.stderr, err)
		}
		if re.Line != tc.wantLine || re.Text != tc.wantText || re.Err.ExitCode != 2 || !IsRestoreError(err) {
			t.Errorf("stderr %q: line %d text %q code %d; want line %d text %q code 2", tc.stderr, re.Line, re.Text, re.Err.ExitCode, tc.wantLine, tc.wantText)
		}
		if tc.wantLine > 0 && !strings.Contains(err.Error(), fmt.Sprintf("input line %d", tc.wantLine)) {
			t.Errorf("error text %q does not name line %d", err, tc.wantLine)
		}
	}
}

func TestParseIPTablesVersion(t *testing.T) {
	cases := []struct {
		in   string
		want IPTablesVersion
		err  bool
	}{
		{"iptables v1.8.9 (nf_tables)\n", IPTablesVersion{1, 8, 9, "nf_tables"}, false},
		{"iptables v1.8.9 (legacy)", IPTablesVersion{1, 8, 9, "legacy"}, false},
		{"ip6tables v1.4.21\n", IPTablesVersion{1, 4, 21, ""}, false},
		{"iptables-legacy v1.8.7 (legacy)", IPTablesVersion{1, 8, 7, "legacy"}, false},
		{"iptables v1.6", IPTablesVersion{1, 6, 0, ""}, false},
		{"iptables v1.8.10 (nf_tables): warning\nmore", IPTablesVersion{1, 8, 10, "nf_tables"}, false},
		{"nft v1.0.6", IPTablesVersion{}, true},
		{"", IPTablesVersion{}, true},
		{"iptables v99999999999999999999.1", IPTablesVersion{}, true},
	}
	for _, tc := range cases {
		got, err := ParseIPTablesVersion(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseIPTablesVersion(%q) = %v, %v; want %v, err %v", tc.in, got, err, tc.want, tc.err)
		}
	}
	if !(IPTablesVersion{1, 8, 9, ""}).AtLeast(IPTablesVersion{1, 6, 2, ""}) || (IPTablesVersion{1, 6, 1, ""}).AtLeast(IPTablesVersion{1, 6, 2, ""}) {
		t.Error("AtLeast ordering")
	}
}

func FuzzParseIPTablesVersion(f *testing.F) {
	for _, s := range []string{"iptables v1.8.9 (nf_tables)", "ip6tables v1.4.21", "iptables v1.6", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseIPTablesVersion(s)
		if err != nil {
			return
		}
		// A parsed version prints back in a form that parses to the same version.
		again, err := ParseIPTablesVersion("iptables " + v.String())
		if err != nil || again != v {
			t.Fatalf("%q -> %v -> %v, %v", s, v, again, err)
		}
	})
}

func TestDetectBackend(t *testing.T) {
	hint := "*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n"
	rules := func(n int) string {
		return "*filter\n" + strings.Repeat("-A INPUT -j ACCEPT\n", n) + "COMMIT\n"
	}
	cases := []struct {
		name    string
		answers map[string]string // command line -> stdout ("!" = fails)
		want    Backend
	}{
		{"empty namespace", nil, BackendNFT},
		{"nft hint", map[string]string{"iptables-nft-save -t mangle": hint, "iptables-legacy-save": rules(9)}, BackendNFT},
		{"legacy hint wins over rule counts", map[string]string{"ip6tables-legacy-save -t mangle": strings.Replace(hint, "IPTABLES-HINT", "KUBELET-CANARY", 1), "iptables-nft-save": rules(9)}, BackendLegacy},
		{"more legacy rules", map[string]string{"iptables-legacy-save": rules(3), "ip6tables-nft-save": rules(2)}, BackendLegacy},
		{"tie goes to nft", map[string]string{"iptables-legacy-save": rules(2), "ip6tables-nft-save": rules(2)}, BackendNFT},
		{"failing legacy tools count as none", map[string]string{"iptables-legacy-save": "!", "iptables-nft-save": rules(1)}, BackendNFT},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			for k, v := range tc.answers {
				if v == "!" {
					f.on("ip netns exec ns "+k, 1, rules(50), "boom")
				} else {
					f.on("ip netns exec ns "+k, 0, v, "")
				}
			}
			got, err := detectBackend(context.Background(), f, "ns")
			if err != nil || got != tc.want {
				t.Errorf("detectBackend = %q, %v; want %q (calls %q)", got, err, tc.want, f.calls)
			}
		})
	}
	// Auto in NewIPTables probes the detected backend's version.
	f := newFake()
	f.on("iptables-legacy-save", 0, rules(1), "")
	f.on("iptables-legacy --version", 0, "iptables v1.8.9 (legacy)\n", "")
	ipt, err := newIPTables(context.Background(), IPTablesOptions{Netns: HostNamespace}, f)
	if err != nil || ipt.Backend() != BackendLegacy || ipt.Version().Mode != "legacy" {
		t.Errorf("auto: %v, %v", ipt, err)
	}
	if _, err := newIPTables(context.Background(), IPTablesOptions{Backend: "iptables", Netns: HostNamespace}, newFake()); err == nil {
		t.Error("unknown backend: want an error")
	}
	f = newFake()
	f.on("iptables-nft --version", -1, "", "")
	if _, err := newIPTables(context.Background(), IPTablesOptions{Backend: BackendNFT, Netns: HostNamespace}, f); err == nil {
		t.Error("failing version probe: want an error")
	}
}

func TestRemoveStaleNetns(t *testing.T) {
	dir := t.TempDir()
	dead := 0
	for pid := 4194000; pid > 1000; pid-- {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) {
			dead = pid
			break
		}
	}
	if dead == 0 {
		t.Skip("no free pid found")
	}
	me := os.Getpid()
	names := []string{
		fmt.Sprintf("clh%d-1-node0", dead), // crashed run: removed
		fmt.Sprintf("clh%d-7-p3", dead),    // crashed run: removed
		fmt.Sprintf("clh%d-1-ext", me),     // this process: kept
		"clh1-1-ext",                       // live pid 1: kept
		fmt.Sprintf("xyz%d-1-ext", dead),   // other prefix: kept
		fmt.Sprintf("clh%d-ext", dead),     // not the pattern: kept
		"emuprobe",                         // someone else's: kept
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := newFake()
	removeStaleNetns(context.Background(), f, dir, "clh")
	want := []string{fmt.Sprintf("ip netns del clh%d-1-node0", dead), fmt.Sprintf("ip netns del clh%d-7-p3", dead)}
	if diff := cmp.Diff(want, f.calls); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestHarnessConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  HarnessConfig
		want string
	}{
		{"bad prefix", HarnessConfig{Prefix: "Bad-"}, "Prefix"},
		{"duplicate pod", HarnessConfig{Pods: []PodConfig{{Name: "a"}, {Name: "a"}}}, `Pods[1].Name "a": duplicate`},
		{"pod on missing node", HarnessConfig{Pods: []PodConfig{{Name: "a", Node: 1}}}, "Node 1 does not exist"},
		{"unnamed pod", HarnessConfig{Pods: []PodConfig{{}}}, "Pods[0].Name"},
		{"small cluster CIDR", HarnessConfig{ClusterCIDR: mustPrefix("10.0.0.0/24")}, "ClusterCIDR"},
		{"IPv6 node network", HarnessConfig{NodeNetwork: mustPrefix("fd00::/64")}, "NodeNetwork"},
		{"topology", HarnessConfig{Topology: "mesh"}, "Topology"},
		{"duplicate pod IP", HarnessConfig{Pods: []PodConfig{{Name: "a", IP: mustAddr("10.244.0.5")}, {Name: "b", IP: mustAddr("10.244.0.5")}}}, "already belongs to pod a"},
		{"node IPs for two nodes, one node", HarnessConfig{NodeIPs: []netip.Addr{mustAddr("192.168.77.2"), mustAddr("192.168.77.3")}}, "2 addresses for 1 nodes"},
		{"node IP off the node network", HarnessConfig{NodeIPs: []netip.Addr{mustAddr("172.18.0.2")}}, "NodeIPs[0] 172.18.0.2"},
		{"node IP of the external client", HarnessConfig{NodeIPs: []netip.Addr{mustAddr("192.168.77.100")}}, "NodeIPs[0]"},
		{"two nodes, one IP", HarnessConfig{SecondNode: true, NodeIPs: []netip.Addr{mustAddr("192.168.77.2"), mustAddr("192.168.77.2")}}, "NodeIPs[1]"},
	}
	for _, tc := range cases {
		err := tc.cfg.setDefaults()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestConntrackCommandLines(t *testing.T) {
	v4, v6 := mustAddr("10.96.0.10"), mustAddr("fd00::10")
	cases := []struct {
		name   string
		opts   ConntrackOptions
		filter proxy.ConntrackFilter
		want   string
	}{
		{"udp service port", ConntrackOptions{Netns: HostNamespace}, proxy.ConntrackFilter{Protocol: 17, OrigDst: v4, OrigDstPort: 53}, "conntrack -D -p udp --orig-dst 10.96.0.10 --orig-port-dst 53"},
		{"endpoint in netns", ConntrackOptions{Netns: "n"}, proxy.ConntrackFilter{Protocol: 17, ReplySrc: mustAddr("10.244.0.2"), ReplySrcPort: 8080}, "ip netns exec n conntrack -D -p udp --reply-src 10.244.0.2 --reply-port-src 8080"},
		{"ipv6 from the address", ConntrackOptions{Netns: HostNamespace}, proxy.ConntrackFilter{Protocol: 132, OrigSrc: mustAddr("fd00::1"), OrigDst: v6}, "conntrack -D -f ipv6 -p sctp --orig-src fd00::1 --orig-dst fd00::10"},
		{"ipv6 from the options", ConntrackOptions{Family: IPv6, Netns: HostNamespace}, proxy.ConntrackFilter{Protocol: 6}, "conntrack -D -f ipv6 -p tcp"},
		{"everything", ConntrackOptions{Netns: HostNamespace}, proxy.ConntrackFilter{}, "conntrack -D"},
		{"unnamed protocol", ConntrackOptions{Netns: HostNamespace}, proxy.ConntrackFilter{Protocol: 99}, "conntrack -D -p 99"},
	}
	for _, tc := range cases {
		f := newFake()
		f.on(tc.want, 0, "", "conntrack v1.4.7 (conntrack-tools): 2 flow entries have been deleted.\n")
		n, err := newConntrack(tc.opts, f).Delete(tc.filter)
		if err != nil || n != 2 {
			t.Errorf("%s: n=%d err=%v; want 2 (calls %q)", tc.name, n, err, f.calls)
		}
		if len(f.calls) != 1 || f.calls[0] != tc.want {
			t.Errorf("%s: calls %q, want %q", tc.name, f.calls, tc.want)
		}
	}
	for _, bad := range []proxy.ConntrackFilter{
		{OrigDstPort: 53},
		{Protocol: 1, OrigDstPort: 53},
		{Protocol: 17, OrigSrc: v4, OrigDst: v6},
	} {
		f := newFake()
		if _, err := newConntrack(ConntrackOptions{Netns: HostNamespace}, f).Delete(bad); err == nil || len(f.calls) != 0 {
			t.Errorf("filter %+v: err %v, calls %q; want an error and no command", bad, err, f.calls)
		}
	}
	// Nothing matched: the tool exits 1, which is success with 0.
	f := newFake()
	f.on("conntrack -D -p udp", 1, "", "conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted.\n")
	f.on("conntrack -D -p tcp", 1, "", "conntrack v1.4.7 (conntrack-tools): Operation failed: invalid parameters\n")
	ct := newConntrack(ConntrackOptions{Netns: HostNamespace}, f)
	if n, err := ct.Delete(proxy.ConntrackFilter{Protocol: 17}); err != nil || n != 0 {
		t.Errorf("no match: n=%d err=%v", n, err)
	}
	if _, err := ct.Delete(proxy.ConntrackFilter{Protocol: 6}); err == nil || !strings.Contains(err.Error(), "invalid parameters") {
		t.Errorf("tool failure: %v; want the tool's stderr", err)
	}
	f.reset()
	if err := newConntrack(ConntrackOptions{Netns: "n", Family: IPv6}, f).Flush(context.Background()); err != nil || len(f.calls) != 1 || f.calls[0] != "ip netns exec n conntrack -F -f ipv6" {
		t.Errorf("Flush: %v, calls %q", err, f.calls)
	}
	// List runs -L -o extended with the filter and parses.
	f.on("conntrack -L -o extended -p udp --orig-dst 10.96.0.10", 0,
		"ipv4     2 udp      17 29 src=192.168.77.100 dst=10.96.0.10 sport=41000 dport=53 src=10.244.0.2 dst=192.168.77.100 sport=8080 dport=41000 mark=0 use=1\n",
		"conntrack v1.4.7 (conntrack-tools): 1 flow entries have been shown.\n")
	entries, err := ct.List(context.Background(), proxy.ConntrackFilter{Protocol: 17, OrigDst: v4})
	if err != nil || len(entries) != 1 || entries[0].Reply.Src != mustAddr("10.244.0.2") {
		t.Errorf("List: %v, %v", entries, err)
	}
}

func TestCheckReport(t *testing.T) {
	f := newFake()
	f.on("iptables-nft --version", 0, "iptables v1.8.9 (nf_tables)\n", "")
	f.on("iptables-legacy --version", -1, "", "")
	f.on("conntrack --version", 0, "", "conntrack v1.4.7 (conntrack-tools)\n")
	f.on("ipset --version", 0, "ipset v7.17, protocol version: 7\n", "")
	f.on("nft --version", -1, "", "")
	f.on("ip6tables-nft --version", -1, "", "")
	f.on("ip6tables-legacy --version", -1, "", "")
	f.on("iptables-legacy-save", 0, "*filter\n-A INPUT -j ACCEPT\nCOMMIT\n", "")
	rep := check(context.Background(), f)
	if rep.IPSet.Version != "ipset v7.17, protocol version: 7" || rep.NFT.Err == "" {
		t.Errorf("ipset %+v, nft %+v", rep.IPSet, rep.NFT)
	}
	for feature, ok := range map[string]bool{"iptables": true, "ip6tables": false, "conntrack": true, "ipset": true, "nft": false} {
		if err := rep.Feature(feature); (err == nil) != ok {
			t.Errorf("Feature(%s) = %v, want ok %v", feature, err, ok)
		}
	}
	if err := rep.Feature("bogus"); err == nil || !strings.Contains(err.Error(), "unknown feature") {
		t.Errorf("Feature(bogus) = %v", err)
	}
	if len(rep.IPTables) != 4 || rep.IPTables[0].Version != "iptables v1.8.9 (nf_tables)" || rep.IPTables[1].Err == "" {
		t.Errorf("iptables reports: %+v", rep.IPTables)
	}
	if rep.Conntrack.Version != "conntrack v1.4.7 (conntrack-tools)" {
		t.Errorf("conntrack report: %+v (a version printed on stderr counts)", rep.Conntrack)
	}
	if rep.Backend != BackendLegacy {
		t.Errorf("detected backend %q, want legacy (it holds the only rule)", rep.Backend)
	}
	text := rep.String()
	for _, want := range []string{"iptables-nft         iptables v1.8.9 (nf_tables)\n", "iptables-legacy      unavailable: ", "detected backend     legacy\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("report text lacks %q:\n%s", want, text)
		}
	}
}

// kernel check lists what kube-proxy's nftables mode needs: nft >= 1.0.1 and a kernel
// >= 5.13; the fields other tools read keep their JSON names.
func TestCheckNFTablesMode(t *testing.T) {
	dir := t.TempDir()
	old := osReleasePath
	t.Cleanup(func() { osReleasePath = old })
	cases := []struct {
		name, nft, release string
		skipEnv            bool
		nftOK, modeOK      bool
		why                string
	}{
		{"debian bookworm", "nftables v1.0.6 (Lester Gooch #5)\n", "6.1.0-18-amd64\n", false, true, true, ""},
		{"exactly the minimum", "nftables v1.0.1 (Fearless Fosdick #3)\n", "5.13.0-52-generic\n", false, true, true, ""},
		{"old kernel", "nftables v1.0.6 (Lester Gooch #5)\n", "5.10.0-28-amd64\n", false, true, false, "kernel 5.10.0-28-amd64 is too old: kube-proxy's nftables mode needs 5.13.0 or later"},
		{"old kernel, kube-proxy's check skipped", "nftables v1.0.6 (Lester Gooch #5)\n", "5.10.0-28-amd64\n", true, true, true, ""},
		{"old nft", "nftables v1.0.0 (Fearless Fosdick #3)\n", "6.1.0\n", false, false, false, "nft v1.0.0 is too old"},
		{"both old", "nftables v0.9.8 (E.D.S.)\n", "4.19.0-26-amd64\n", false, false, false, "nft v0.9.8 is too old: kube-proxy's nftables mode (knftables) needs v1.0.1 or later; kernel 4.19.0-26-amd64 is too old"},
		{"no nft", "", "6.1.0\n", false, false, false, "nft: "},
		{"unreadable release", "nftables v1.0.6 (Lester Gooch #5)\n", "", false, true, false, "kernel: cannot parse kernel release \"unknown: "},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skipEnv {
				t.Setenv(skipKernelCheckEnv, "1")
			} else {
				t.Setenv(skipKernelCheckEnv, "")
			}
			osReleasePath = filepath.Join(dir, fmt.Sprintf("osrelease%d", i))
			if tc.release != "" {
				if err := os.WriteFile(osReleasePath, []byte(tc.release), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			f := newFake()
			if tc.nft != "" {
				f.on("nft --version", 0, tc.nft, "")
			} else {
				f.on("nft --version", -1, "", "")
			}
			rep := check(context.Background(), f)
			if tc.release != "" && rep.KernelRelease != strings.TrimSpace(tc.release) {
				t.Errorf("KernelRelease %q", rep.KernelRelease)
			}
			if err := rep.Feature("nft"); (err == nil) != tc.nftOK {
				t.Errorf("Feature(nft) = %v, want ok %v", err, tc.nftOK)
			}
			err := rep.Feature("nftables")
			if (err == nil) != tc.modeOK || tc.why != "" && (err == nil || !strings.Contains(err.Error(), tc.why)) {
				t.Errorf("Feature(nftables) = %v, want ok %v, containing %q", err, tc.modeOK, tc.why)
			}
			wantMode := "supported"
			if err != nil {
				wantMode = err.Error()
			}
			if rep.NFTablesMode != wantMode {
				t.Errorf("NFTablesMode %q, want %q", rep.NFTablesMode, wantMode)
			}
			text := rep.String()
			if !strings.Contains(text, "nftables mode        "+wantMode+"\n") || !strings.Contains(text, "kernel               "+rep.KernelRelease+"\n") {
				t.Errorf("report text:\n%s", text)
			}
		})
	}
	// The JSON keys other tools read are all still there, with the new ones beside.
	b, err := json.Marshal(check(context.Background(), newFake()))
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"iptables", "conntrack", "ipset", "nft", "ipvs", "harness", "br_netfilter", "detected_backend", "kernel_release", "nftables_mode"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("check JSON lacks %q: %s", k, b)
		}
	}
	if !slices.Contains(Features, "nftables") || !slices.Contains(Features, "nft") {
		t.Errorf("Features %v", Features)
	}
}

func TestParseKernelVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want KernelVersion
		ok   bool
	}{
		{"6.18.44-fc-v782\n", KernelVersion{6, 18, 44}, true},
		{"5.13.0-52-generic", KernelVersion{5, 13, 0}, true},
		{"6.1", KernelVersion{6, 1, 0}, true},
		{"4.19.0-26-amd64", KernelVersion{4, 19, 0}, true},
		{"unknown: no such file", KernelVersion{}, false},
		{"", KernelVersion{}, false},
		{"99999999999999999999.1", KernelVersion{}, false},
	} {
		got, err := ParseKernelVersion(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseKernelVersion(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if !(KernelVersion{5, 13, 0}).AtLeast(MinNFTablesKernel) || (KernelVersion{5, 12, 99}).AtLeast(MinNFTablesKernel) {
		t.Error("AtLeast")
	}
}

// CheckRestore is Restore with --test; a refusal names the input line.
func TestCheckRestoreCommandLine(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	ipt := newFakeIPTables(t, f, IPTablesOptions{Backend: BackendLegacy, Netns: "n1"}, "iptables v1.8.9 (legacy)\n")
	data := []byte("*nat\n:KUBE-X - [0:0]\n-A KUBE-X -j NOPE\nCOMMIT\n")
	want := "ip netns exec n1 iptables-legacy-restore -w 5 -W 100000 --test --noflush"
	f.on(want, 2, "", "iptables-restore v1.8.9 (legacy): Couldn't load target `NOPE':No such file or directory\n\nError occurred at line: 3\n")
	err := ipt.CheckRestore(ctx, data, iptables.RestoreOptions{NoFlush: true})
	var re *RestoreError
	if !errors.As(err, &re) || re.Line != 3 || re.Text != "-A KUBE-X -j NOPE" {
		t.Errorf("CheckRestore: %v; want a RestoreError at line 3", err)
	}
	if len(f.calls) != 1 || f.calls[0] != want || f.stdins[0] != string(data) {
		t.Errorf("calls %q stdin %q; want %q", f.calls, f.stdins, want)
	}
}
