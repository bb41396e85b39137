package scenario

import (
	"strconv"
	"strings"
	"testing"
)

// raceScenario is the parallel A/AAAA conntrack insert race as a scenario: two CoreDNS
// pods (kube-dns on node-b and node-c), a client on node-a whose kernel is 5.4, and dns
// steps whose queries node-a holds in flight together.
const raceScenario = `cluster:
  nodes:
    - {name: node-a, settings: {kernel: {version: "5.4"}}}
    - {name: node-b}
    - {name: node-c}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {clusterIP: 10.96.1.80, selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: i}]}}
steps:
%s
`

// TestDNSStepTogether: a dns step with together has the client's node hold its A and
// AAAA queries in flight together. With seeded random interleavings (the proxy's pick
// of a CoreDNS pod from the same seed) some lookups lose the AAAA query at
// confirmation and wait 5 s, and conntrack -S counts one insert_failed for each; the
// others do not. With single-request-reopen nothing is ever in flight together.
func TestDNSStepTogether(t *testing.T) {
	var steps strings.Builder
	const n = 12
	for seed := 1; seed <= n; seed++ {
		steps.WriteString("  - name: seed " + strconv.Itoa(seed) + "\n    dns: {from: pod:default/client, name: web, type: both, together: {random: true, seed: " + strconv.Itoa(seed) + "}}\n")
	}
	steps.WriteString("  - name: reopen\n    dns: {from: pod:default/client, name: web, type: both, options: [single-request-reopen], together: {steps: [0, 1, 0, 1]}}\n    expect: {delay: {at_most: 0s}}\n")
	steps.WriteString("  - name: stats\n    check: {conntrack_stats: {node: node-a}}\n")
	rep := mustRun(t, mustParse(t, strings.Replace(raceScenario, "%s", steps.String(), 1)), "iptables")
	lost := 0
	for seed := 1; seed <= n; seed++ {
		st := step(t, rep, "seed "+strconv.Itoa(seed))
		if len(st.DNS.InFlight) != 2 {
			t.Fatalf("seed %d: in flight %v, want the A and AAAA queries", seed, st.DNS.InFlight)
		}
		drop := strings.HasPrefix(st.DNS.InFlight[1], "DROP ")
		if drop {
			lost++
			if !strings.Contains(st.DNS.InFlight[1], "clash") {
				t.Errorf("seed %d: %v, want the clash named", seed, st.DNS.InFlight)
			}
		}
		if want := map[bool]string{true: "5s", false: "0s"}[drop]; st.DNS.Delay != want {
			t.Errorf("seed %d: delay %s, want %s (in flight %v)", seed, st.DNS.Delay, want, st.DNS.InFlight)
		}
		if st.DNS.Rcode != "NOERROR" || len(st.DNS.Answers) != 1 {
			t.Errorf("seed %d: %s %v, want web's address", seed, st.DNS.Rcode, st.DNS.Answers)
		}
	}
	if lost == 0 || lost == n {
		t.Errorf("%d of %d lookups lost a query, want some and not all (1/4 on average)", lost, n)
	}
	if st := step(t, rep, "reopen"); st.Status != "ok" || len(st.DNS.InFlight) != 1 {
		t.Errorf("reopen: %s, in flight %v; want the first query alone and no wait", st.Status, st.DNS.InFlight)
	}
	if st := step(t, rep, "stats"); !strings.Contains(st.Summary, " insert_failed="+strconv.Itoa(lost)+" ") {
		t.Errorf("conntrack -S: %s, want insert_failed=%d", st.Summary, lost)
	}
}

// TestDNSStepTogetherErrors: together goes with the stub resolver's A and AAAA in
// kube-dns mode, with a valid interleaving.
func TestDNSStepTogetherErrors(t *testing.T) {
	_, err := Parse("test.yaml", []byte(`cluster: {nodes: [{name: node-a}]}
steps:
  - dns: {from: pod:default/c, name: web, type: SRV, together: {}}
  - dns: {from: pod:default/c, name: web, type: both, together: {steps: [0, 2], random: true, seed: 3}}
  - dns: {from: pod:default/c, name: web, type: both, together: {count: 9, window: 0s, seed: 1}}
`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"test.yaml:3: steps[0].dns.together: packets in flight together go with type both or options",
		"test.yaml:4: steps[1].dns.together.steps: steps and random exclude each other",
		"test.yaml:4: steps[1].dns.together.steps[1]: want a packet from 0 to 1, got 2",
		"test.yaml:5: steps[2].dns.together.count: want 1 to 8 packets, got 9",
		"test.yaml:5: steps[2].dns.together.window: want a positive duration, got 0s",
		"test.yaml:5: steps[2].dns.together.seed: seed goes with random: true",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in:\n%v", want, err)
		}
	}
}
