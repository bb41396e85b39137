package scenario

import (
	"os"
	"strings"
	"testing"
)

// TestIPTablesOldReleasesRun: the nodeport-local scenario under the iptables mode of
// kube-proxy 1.20, 1.24 and 1.25. Every step holds in each release (eTP=Local keeps the
// client's address; the node without a local endpoint drops), and the drop's reason
// names where that release drops: kubelet's KUBE-FIREWALL on the 0x8000 mark that
// KUBE-XLB (1.20) or KUBE-EXT (1.24) set, KUBE-EXTERNAL-SERVICES from 1.25.
func TestIPTablesOldReleasesRun(t *testing.T) {
	data, err := os.ReadFile("../testdata/scenarios/nodeport-local.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ version, droppedIn string }{
		{"1.20", "KUBE-FIREWALL"},
		{"1.24", "KUBE-FIREWALL"},
		{"1.25", "KUBE-EXTERNAL-SERVICES"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			src := strings.Replace(string(data), "mode: iptables", "mode: iptables\n    version: \""+tc.version+"\"", 1)
			rep := mustRun(t, mustParse(t, src), "")
			if rep.Version != tc.version {
				t.Errorf("report says version %s", rep.Version)
			}
			for _, st := range rep.Steps {
				if st.Status != "ok" {
					t.Errorf("step %q: %s: %s %s %v", st.Title, st.Status, st.Summary, st.Error, st.Details)
				}
			}
			drop := step(t, rep, "Local policy via node-a (no local endpoint) is dropped")
			if why := strings.Join(keys(drop.Traffic.Reasons), "; "); !strings.Contains(why, tc.droppedIn) {
				t.Errorf("dropped because %q, want %s", why, tc.droppedIn)
			}
		})
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestIPTablesInternalTrafficPolicyByRelease: a client on node-a connects to an
// internalTrafficPolicy Local Service whose one endpoint is on node-b. kube-proxy 1.21
// ignores the policy (ServiceInternalTrafficPolicy alpha, off) and connects; 1.23 treats
// the port as having no endpoints and REJECTs (refused); 1.24 drops it in filter.
func TestIPTablesInternalTrafficPolicyByRelease(t *testing.T) {
	text := `cluster:
  dns: off
  nodes: [{name: node-a}, {name: node-b}]
  proxy: {mode: iptables, version: "VERSION"}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {internalTrafficPolicy: Local, selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-b, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: i}]}}
steps:
  - name: from node-a
    connect: {from: pod:default/client, to: service:default/web:80}
`
	for _, tc := range []struct{ version, result string }{
		{"1.21", "connected"},
		{"1.23", "refused"},
		{"1.24", "dropped"},
	} {
		rep := mustRun(t, mustParse(t, strings.Replace(text, "VERSION", tc.version, 1)), "")
		if r := rep.Steps[0].Traffic.Results; r[tc.result] != 1 {
			t.Errorf("kube-proxy %s: results %v, want 1 %s", tc.version, r, tc.result)
		}
	}
}
