package userspace

import (
	"bytes"
	"context"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/service"

	corev1 "k8s.io/api/core/v1"
)

var update = flag.Bool("update", false, "rewrite golden files")

const testdata = "../../testdata/userspace"

var nodeIP = netip.MustParseAddr("172.18.0.2")

// goldenPortals loads testdata/userspace/services.yaml and gives its service ports proxy
// ports 40001, 40002, ... in service port order (SCTP ones skipped, as the proxier
// skips them).
func goldenPortals(t *testing.T) []Portal {
	t.Helper()
	ms, err := service.LoadPaths(filepath.Join(testdata, "services.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var svcs []*corev1.Service
	for _, m := range ms {
		service.Default(m.Object)
		svcs = append(svcs, m.Object.(*corev1.Service))
	}
	spm, err := proxy.BuildServicePortMap(svcs, corev1.IPv4Protocol)
	if err != nil {
		t.Fatal(err)
	}
	var out []Portal
	for _, name := range spm.SortedNames() {
		if spm[name].Protocol == corev1.ProtocolSCTP {
			continue
		}
		out = append(out, Portal{Service: spm[name], ProxyPort: uint16(40001 + len(out))})
	}
	return out
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join(testdata, name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestRenderRulesGolden(t *testing.T) {
	portals := goldenPortals(t)
	if len(portals) != 4 {
		t.Fatalf("%d portals, want 4 (dns x2, shop, web)", len(portals))
	}
	checkGolden(t, "rules.golden", RenderRules(portals, RuleOptions{HostIP: nodeIP}))
	// Bound to one address, the listeners get DNAT instead of REDIRECT.
	bound := RenderRules(portals[:1], RuleOptions{ListenIP: nodeIP, HostIP: nodeIP})
	if bytes.Contains(bound, []byte("REDIRECT")) || !bytes.Contains(bound, []byte("-j DNAT --to-destination 172.18.0.2:40001")) {
		t.Errorf("bound listener:\n%s", bound)
	}
}

// loadedEmulator is an emulator holding the golden rules, their jumps, and something of
// another owner in the built-in chains.
func loadedEmulator(t *testing.T) *emulator.Emulator {
	t.Helper()
	emu := emulator.New(emulator.IPv4)
	other := "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:DOCKER - [0:0]\n-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER\n-A OUTPUT -j DOCKER\nCOMMIT\n"
	if err := emu.RestoreText([]byte(other), emulator.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	jd, err := ensureJumps(ctx, emu)
	if err != nil {
		t.Fatalf("%v\n%s", err, jd)
	}
	if err := emu.Restore(ctx, RenderRules(goldenPortals(t), RuleOptions{HostIP: nodeIP}), iptables.RestoreOptions{NoFlush: true}); err != nil {
		t.Fatal(err)
	}
	return emu
}

func TestJumpRules(t *testing.T) {
	emu := loadedEmulator(t)
	ctx := context.Background()
	saved, err := emu.Save(ctx, "nat")
	if err != nil {
		t.Fatal(err)
	}
	var pre []string
	for _, l := range strings.Split(string(saved), "\n") {
		if strings.HasPrefix(l, "-A PREROUTING ") {
			pre = append(pre, l)
		}
	}
	// The portal jump first, the node-port jump after everything else.
	if len(pre) != 3 || !strings.HasSuffix(pre[0], "-j "+ChainPortalsContainer) || !strings.HasSuffix(pre[2], "-j "+ChainNodePortContainer) {
		t.Errorf("PREROUTING:\n%s", strings.Join(pre, "\n"))
	}
	// The jumps as saved are the jumps as written.
	for _, j := range jumpRules {
		if j.Table == "nat" && !bytes.Contains(saved, []byte("-A "+j.Chain+" "+j.Spec()+"\n")) {
			t.Errorf("saved nat table lacks %q:\n%s", j.Spec(), saved)
		}
	}
	// Idempotent: nothing to add the second time.
	if jd, err := ensureJumps(ctx, emu); err != nil || jd != nil {
		t.Errorf("second ensure: %q, %v", jd, err)
	}
	// Restoring the chains again replaces their rules rather than adding to them.
	before, _ := emu.Save(ctx)
	if err := emu.Restore(ctx, RenderRules(goldenPortals(t), RuleOptions{HostIP: nodeIP}), iptables.RestoreOptions{NoFlush: true}); err != nil {
		t.Fatal(err)
	}
	if after, _ := emu.Save(ctx); !bytes.Equal(before, after) {
		t.Errorf("a second restore changed the ruleset:\n%s\nvs\n%s", before, after)
	}
}

func TestRulesRedirectInEmulator(t *testing.T) {
	emu := loadedEmulator(t)
	local := []netip.Addr{nodeIP, netip.MustParseAddr("10.244.0.1")}
	// Ports: default/shop:https 40001, default/web:http 40002, kube-system/dns:dns
	// 40003, kube-system/dns:dns-tcp 40004. A stand-alone walk does not know the
	// input interface's address, so for REDIRECT only the port is checked.
	cases := []struct {
		name, pkt string
		from      emulator.From
		dnat      string // "" for none; ":PORT" checks only the port (REDIRECT)
		rule      string // a matched rule contains this
	}{
		{"pod to cluster IP", "tcp 10.244.0.5:41000 10.96.0.80:80", emulator.FromPod, ":40002", "-j REDIRECT --to-ports 40002"},
		{"pod to cluster IP, UDP", "udp 10.244.0.5:41000 10.96.0.10:53", emulator.FromPod, ":40003", "-j REDIRECT --to-ports 40003"},
		{"pod to cluster IP, same port, TCP", "tcp 10.244.0.5:41000 10.96.0.10:53", emulator.FromPod, ":40004", "-j REDIRECT --to-ports 40004"},
		{"node to cluster IP", "tcp 172.18.0.2:41000 10.96.0.80:80", emulator.FromNode, "172.18.0.2:40002", "-j DNAT --to-destination 172.18.0.2:40002"},
		{"external to node port", "tcp 203.0.113.9:41000 172.18.0.2:30080", emulator.FromExternal, ":40002", "-A KUBE-NODEPORT-CONTAINER"},
		{"node to its own node port", "tcp 172.18.0.2:41000 172.18.0.2:31443", emulator.FromNode, "172.18.0.2:40001", "-A KUBE-NODEPORT-HOST"},
		{"external to load-balancer IP", "tcp 203.0.113.9:41000 198.51.100.7:443", emulator.FromExternal, ":40001", "-d 198.51.100.7/32"},
		{"node port on a non-local address", "tcp 203.0.113.9:41000 10.1.2.3:30080", emulator.FromExternal, "", ""},
		{"wrong port", "tcp 10.244.0.5:41000 10.96.0.80:81", emulator.FromPod, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pk := parseWalkPacket(t, tc.pkt)
			r, err := emu.Walk(emulator.WalkInput{Packet: pk, From: tc.from, Local: local})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Outcomes) != 1 {
				t.Fatalf("%d outcomes:\n%s", len(r.Outcomes), r.Text())
			}
			o := r.Outcomes[0]
			got := ""
			if o.DNATDestination != nil {
				got = *o.DNATDestination
			}
			if !(got == tc.dnat || strings.HasPrefix(tc.dnat, ":") && strings.HasSuffix(got, tc.dnat)) {
				t.Errorf("destination %q, want %q\n%s", got, tc.dnat, r.Text())
			}
			if tc.dnat == "" && o.Verdict != "ACCEPT" {
				t.Errorf("verdict %s, want ACCEPT (forwarded untouched)\n%s", o.Verdict, r.Text())
			}
			if tc.rule != "" {
				found := false
				for _, m := range o.MatchedRules {
					found = found || strings.Contains(m.Rule, tc.rule)
				}
				if !found {
					t.Errorf("no matched rule contains %q:\n%s", tc.rule, r.Text())
				}
			}
		})
	}
}

func parseWalkPacket(t *testing.T, s string) emulator.Packet {
	t.Helper()
	f := strings.Fields(s)
	proto, err := emulator.ParseProto(f[0])
	if err != nil {
		t.Fatal(err)
	}
	src, dst := netip.MustParseAddrPort(f[1]), netip.MustParseAddrPort(f[2])
	return emulator.Packet{Proto: proto, Src: src.Addr(), SrcPort: src.Port(), Dst: dst.Addr(), DstPort: dst.Port(), TCPFlags: netfilter.TCPSyn}
}
