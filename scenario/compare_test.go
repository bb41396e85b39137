package scenario

import (
	"strings"
	"testing"
)

// TestReasonKind: the same reason in two modes' words is one kind; a rule's drop and a
// routing failure are two.
func TestReasonKind(t *testing.T) {
	for _, tc := range []struct{ reason, want string }{
		{"rejected (icmp-port-unreachable) by kube-proxy IPv4 filter at FORWARD: filter/KUBE-SERVICES line 9", "a rule rejected it (icmp-port-unreachable)"},
		{"rejected (icmp-port-unreachable) by ipvs at INPUT: IPVS TCP 10.96.0.1:80 rr: no destination available", "a rule rejected it (icmp-port-unreachable)"},
		{"dropped by kube-proxy IPv4 filter at FORWARD: filter/KUBE-FIREWALL line 2", "a rule dropped it"},
		{"no route to 10.200.0.1 in the cluster network", "routing: no route"},
		{"the reply did not come back: no route to 10.244.0.2", "the reply did not come back: routing: no route"},
		{"nothing listens on tcp/80", "nothing listens"},
		{"something new", "something new"},
	} {
		if got := ReasonKind(tc.reason); got != tc.want {
			t.Errorf("ReasonKind(%q) = %q, want %q", tc.reason, got, tc.want)
		}
	}
}

// TestCompareReasons: two modes where every attempt is dropped, one by a rule and one
// by routing, differ in "reasons" though their results are the same; the same reason
// in different words does not make a difference.
func TestCompareReasons(t *testing.T) {
	step := func(reasons map[string]int) StepResult {
		return StepResult{Index: 1, Title: "probe", Status: "ok", Traffic: &TrafficResult{Attempts: 2, Results: map[string]int{"dropped": 2}, Reasons: reasons}}
	}
	cmp := &Comparison{Modes: []string{"iptables", "ipvs"}, Reports: []*Report{
		{Passed: true, Steps: []StepResult{step(map[string]int{"dropped by kube-proxy IPv4 filter at FORWARD: filter/KUBE-FIREWALL line 2": 2})}},
		{Passed: true, Steps: []StepResult{step(map[string]int{"no route to 10.200.0.1": 2})}},
	}}
	cmp.compare(cmp.Modes, false)
	if len(cmp.Differences) != 1 || len(cmp.Differences[0].Facts) != 1 || cmp.Differences[0].Facts[0].Name != "reasons" {
		t.Fatalf("differences: %+v", cmp.Differences)
	}
	if txt := cmp.DiffText(); !strings.Contains(txt, "reasons: iptables: a rule dropped it 2 | ipvs: routing: no route 2") {
		t.Errorf("diff text:\n%s", txt)
	}
	same := &Comparison{Versions: []string{"1.33", "1.34"}, Reports: []*Report{
		{Passed: true, Steps: []StepResult{step(map[string]int{"rejected (icmp-port-unreachable) by kube-proxy IPv4 filter at FORWARD: filter/KUBE-SERVICES line 9": 2})}},
		{Passed: true, Steps: []StepResult{step(map[string]int{"rejected (icmp-port-unreachable) by kube-proxy IPv4 filter at FORWARD: filter/KUBE-SERVICES line 7": 2})}},
	}}
	same.compare(same.Versions, true)
	if len(same.Differences) != 0 || !strings.Contains(same.DiffText(), "nowhere: every step has the same outcome under every version") {
		t.Errorf("the same reason in other words: %+v\n%s", same.Differences, same.DiffText())
	}
}
