package emulator

import (
	"net/netip"
	"strings"
	"testing"
)

// hairpinRules: kube-proxy's shape for two Services on a node whose pods hang off
// cbr0: 10.96.0.50:80 -> 10.244.0.5:8080 (masquerading a pod reaching itself) and
// 10.96.0.60:80 -> 10.244.0.6:8080.
const hairpinRules = `*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:SEP-SOLO - [0:0]
:SEP-WEB - [0:0]
-A PREROUTING -d 10.96.0.50/32 -p tcp -m tcp --dport 80 -j SEP-SOLO
-A PREROUTING -d 10.96.0.60/32 -p tcp -m tcp --dport 80 -j SEP-WEB
-A POSTROUTING -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MASQUERADE
-A SEP-SOLO -s 10.244.0.5/32 -j KUBE-MARK-MASQ
-A SEP-SOLO -p tcp -j DNAT --to-destination 10.244.0.5:8080
-A SEP-WEB -s 10.244.0.6/32 -j KUBE-MARK-MASQ
-A SEP-WEB -p tcp -j DNAT --to-destination 10.244.0.6:8080
COMMIT
*filter
:FORWARD ACCEPT [0:0]
COMMIT
`

func boolp(b bool) *bool { return &b }

// testBridge is cbr0 with pods 10.244.0.5 on vethsolo, .6 on vethweb and .7 on
// vethcli; hairpin says each port's mode (absent: not known).
func testBridge(nf *bool, hairpin map[string]bool) *Bridge {
	ports := map[netip.Addr]string{mustAddr("10.244.0.5"): "vethsolo", mustAddr("10.244.0.6"): "vethweb", mustAddr("10.244.0.7"): "vethcli"}
	pod := netip.MustParsePrefix("10.244.0.0/24")
	return &Bridge{Name: "cbr0", NFCallIPTables: nf,
		PortOf:  func(a netip.Addr) string { return ports[a] },
		Hairpin: func(p string) (bool, bool) { v, ok := hairpin[p]; return v, ok },
		Has:     pod.Contains}
}

// TestBridgeHairpin: a pod's packet to a Service whose endpoint is on the pod's bridge
// gets the fate the kernel gives it, by the port's hairpin mode and
// bridge-nf-call-iptables; the outcome says the bridge decided when it did.
func TestBridgeHairpin(t *testing.T) {
	e := load(t, IPv4, hairpinRules)
	off, on := map[string]bool{"vethsolo": false, "vethweb": true, "vethcli": true}, map[string]bool{"vethsolo": true, "vethweb": true, "vethcli": true}
	for _, c := range []struct {
		name        string
		pkt         string
		nf          *bool
		hairpin     map[string]bool
		verdict     string
		decidedBy   string
		path        string
		hooks       string
		masq, reply bool
	}{
		{"to itself, hairpin off: dropped before FORWARD", "tcp 10.244.0.5:4000 10.96.0.50:80", boolp(true), off, "DROP", "bridge", "bridged", "PREROUTING", false, false},
		{"to itself, hairpin on: bridged back, masqueraded", "tcp 10.244.0.5:4000 10.96.0.50:80", boolp(true), on, "ACCEPT", "policy", "bridged", "PREROUTING,FORWARD,POSTROUTING", true, false},
		{"to itself without br_netfilter: routed, hairpin not consulted", "tcp 10.244.0.5:4000 10.96.0.50:80", boolp(false), off, "ACCEPT", "policy", "routed", "PREROUTING,FORWARD,POSTROUTING", true, false},
		{"to another pod, hairpin off on the client's port: another port", "tcp 10.244.0.5:4000 10.96.0.60:80", boolp(true), off, "ACCEPT", "policy", "bridged", "PREROUTING,FORWARD,POSTROUTING", false, false},
		{"to another pod without br_netfilter: delivered, the reply bypasses conntrack", "tcp 10.244.0.7:4000 10.96.0.60:80", boolp(false), on, "ACCEPT", "policy", "routed", "PREROUTING,FORWARD,POSTROUTING", false, true},
		{"pod to pod without br_netfilter: iptables never sees it", "tcp 10.244.0.7:4000 10.244.0.6:8080", boolp(false), on, "ACCEPT", "bridge", "bridged", "", false, false},
		{"pod to pod with br_netfilter: bridged through iptables", "tcp 10.244.0.7:4000 10.244.0.6:8080", boolp(true), on, "ACCEPT", "policy", "bridged", "PREROUTING,FORWARD,POSTROUTING", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := walk(t, e, WalkInput{Packet: *pkt(c.pkt), From: FromPod, Bridge: testBridge(c.nf, c.hairpin), IfaceAddrs: map[string]netip.Addr{"cbr0": mustAddr("10.244.0.1")}})
			o := r.Outcomes[0]
			if len(r.Outcomes) != 1 || o.Verdict != c.verdict || o.DecidedBy != c.decidedBy || strings.Join(o.Hooks, ",") != c.hooks || o.Masqueraded != c.masq {
				t.Fatalf("%d outcomes; %s by %s via %v masqueraded %v, want %s by %s via %s masqueraded %v\n%s", len(r.Outcomes), o.Verdict, o.DecidedBy, o.Hooks, o.Masqueraded, c.verdict, c.decidedBy, c.hooks, c.masq, r.Text())
			}
			if o.Bridge == nil || o.Bridge.Path != c.path || o.Bridge.Bridge != "cbr0" || (o.Bridge.Reply != "") != c.reply {
				t.Fatalf("bridge hop %+v, want path %s, reply note %v", o.Bridge, c.path, c.reply)
			}
			if len(o.Assumptions) != 0 {
				t.Errorf("assumptions %+v with every setting known", o.Assumptions)
			}
			if c.masq && (o.SNATSource == nil || *o.SNATSource != "10.244.0.1") {
				t.Errorf("masqueraded to %v, want cbr0's 10.244.0.1", o.SNATSource)
			}
			if c.decidedBy == "bridge" && c.verdict == "DROP" {
				if o.Bridge.OutPort != "vethsolo" || o.Bridge.Hairpin == nil || *o.Bridge.Hairpin || !strings.Contains(r.Text(), "DROP dnat 10.244.0.5:8080 by the bridge (cbr0 port vethsolo hairpin off, bridge-nf-call-iptables=1)") {
					t.Errorf("the drop does not name the port and its setting: %+v\n%s", o.Bridge, r.Text())
				}
			}
		})
	}
	// Not from a pod on the bridge: not the bridge's business.
	r := walk(t, e, WalkInput{Packet: *pkt("tcp 192.168.0.9:4000 10.96.0.50:80"), From: FromExternal, Bridge: testBridge(boolp(true), off)})
	if o := r.Outcomes[0]; o.Verdict != "ACCEPT" || o.Bridge != nil {
		t.Errorf("from outside: %s, bridge %+v", o.Verdict, o.Bridge)
	}
	r = walk(t, e, WalkInput{Packet: *pkt("tcp 10.1.0.5:4000 10.96.0.50:80"), From: FromPod, Bridge: testBridge(boolp(true), off)})
	if o := r.Outcomes[0]; o.Verdict != "ACCEPT" || o.Bridge != nil {
		t.Errorf("from a pod not on the bridge: %s, bridge %+v", o.Verdict, o.Bridge)
	}
}

// TestBridgeUnknownSettings: a setting the walk does not know is an assumption the
// outcome lists: on a single path the usual one (hairpin on, br_netfilter on), with
// all branches both, one assumption per setting held on the whole path, outcomes it
// does not decide merged.
func TestBridgeUnknownSettings(t *testing.T) {
	e := load(t, IPv4, hairpinRules)
	in := WalkInput{Packet: *pkt("tcp 10.244.0.5:4000 10.96.0.50:80"), From: FromPod, Bridge: testBridge(boolp(true), nil)}
	r := walk(t, e, in)
	o := r.Outcomes[0]
	if o.Verdict != "ACCEPT" || len(o.Assumptions) != 1 || o.Assumptions[0].Condition != "bridge cbr0 port vethsolo hairpin" || !o.Assumptions[0].Holds {
		t.Fatalf("single path: %s, assumptions %+v", o.Verdict, o.Assumptions)
	}
	if !strings.Contains(r.Text(), "assuming hairpin mode of cbr0 port vethsolo on (not known)") || !strings.Contains(r.Text(), "bridge: hairpin mode of cbr0 port vethsolo not known: assumed on") {
		t.Errorf("the text does not state the assumption:\n%s", r.Text())
	}
	in.AllBranches = true
	r = walk(t, e, in)
	if len(r.Outcomes) != 2 {
		t.Fatalf("all branches: %d outcomes, want DROP and ACCEPT\n%s", len(r.Outcomes), r.Text())
	}
	for _, o := range r.Outcomes {
		if len(o.Assumptions) != 1 || o.Assumptions[0].Holds != (o.Verdict == "ACCEPT") || o.Verdict == "DROP" && o.DecidedBy != "bridge" {
			t.Errorf("%s by %s with assumptions %+v", o.Verdict, o.DecidedBy, o.Assumptions)
		}
	}
	// Neither setting known: three fates (no br_netfilter: routed; with it, hairpin
	// on or off), the hairpin mode not an assumption where it was not consulted.
	in.Bridge = testBridge(nil, nil)
	r = walk(t, e, in)
	got := map[string]int{}
	for _, o := range r.Outcomes {
		got[o.Verdict+"/"+o.Bridge.Path] = len(o.Assumptions)
	}
	if len(r.Outcomes) != 3 || got["DROP/bridged"] != 2 || got["ACCEPT/bridged"] != 2 || got["ACCEPT/routed"] != 1 {
		t.Errorf("outcomes %v (verdict/path: assumptions), want DROP/bridged and ACCEPT/bridged with 2, ACCEPT/routed with 1\n%s", got, r.Text())
	}
	// The mode every port shares stands in for a port not known by name.
	in.AllBranches = false
	br := testBridge(boolp(true), nil)
	br.PortOf = nil
	br.Hairpin = func(p string) (bool, bool) { return false, p == "" }
	in.Bridge = br
	if o := walk(t, e, in).Outcomes[0]; o.Verdict != "DROP" || len(o.Assumptions) != 0 {
		t.Errorf("port unknown, every port hairpin off: %s with %+v", o.Verdict, o.Assumptions)
	}
}
