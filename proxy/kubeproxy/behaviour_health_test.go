package kubeproxy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/proxy"
)

func versionOption(v proxy.Version, gates map[string]bool) Options {
	return Options{Mode: IPTables, Node: func(nc *proxy.NodeConfig) { nc.Version, nc.FeatureGates = v, gates }}
}

// Row 33: node-b's kube-proxy hangs after its only local pod is deleted; past the health
// timeout its health check node port still says one local endpoint. 1.25 answers 200
// (the answer does not look at the proxy), 1.26 answers 503 with serviceProxyHealthy
// false, so the load balancer stops sending to the node with stale rules.
func TestHealthCheckProxyHealthByVersion(t *testing.T) {
	for _, tc := range []struct {
		v      proxy.Version
		status int
		body   string
	}{
		{25, 200, "\"localEndpoints\": 1\n}"},
		{26, 503, `"serviceProxyHealthy": false`},
		{37, 503, `"serviceProxyHealthy": false`},
	} {
		t.Run(tc.v.String(), func(t *testing.T) {
			c, ext, hcPort, _ := localLB(t, cluster.Config{ManualClock: true, Proxy: Factory(versionOption(tc.v, nil))})
			b := c.Node("node-b")
			b.PauseProxy()
			if err := c.DeletePod("default", "web-0", 0); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				c.Clock().Advance(61 * time.Second) // past kube-proxy's health timeout
				close(done)
			}()
			<-done
			resp, body := get(t, ext.Net(), fmt.Sprintf("http://%s/", netip.AddrPortFrom(b.IP(), hcPort)))
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.body) {
				t.Errorf("kube-proxy %s, hung past the timeout: %d %s, want %d with %s", tc.v, resp.StatusCode, body, tc.status, tc.body)
			}
			b.ResumeProxy()
		})
	}
}

// Row 34: node-b carries the ToBeDeletedByClusterAutoscaler taint. Without
// KubeProxyDrainingTerminatingNodes (1.27; 1.28 where it is alpha and off) /healthz
// answers 200 and /livez does not exist; with it (1.28 turned on, 1.31 GA) /healthz
// answers 503 and /livez 200.
func TestHealthzDrainingByVersion(t *testing.T) {
	for _, tc := range []struct {
		v             proxy.Version
		gates         map[string]bool
		healthz, livz int
	}{
		{27, nil, 200, 404},
		{28, nil, 200, 404},
		{28, map[string]bool{"KubeProxyDrainingTerminatingNodes": true}, 503, 200},
		{31, nil, 503, 200},
	} {
		t.Run(fmt.Sprintf("%s%v", tc.v, tc.gates), func(t *testing.T) {
			c, ext, _, _ := localLB(t, cluster.Config{Proxy: Factory(versionOption(tc.v, tc.gates))})
			obj, _ := c.Store().GetNode("node-b")
			obj = obj.DeepCopy()
			obj.Spec.Taints = append(obj.Spec.Taints, corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule})
			if _, err := c.Store().Update(obj); err != nil {
				t.Fatal(err)
			}
			ip := c.Node("node-b").IP()
			resp, body := get(t, ext.Net(), fmt.Sprintf("http://%s:%d/healthz", ip, HealthzPort))
			if resp.StatusCode != tc.healthz {
				t.Errorf("/healthz of a node to be deleted: %d %s, want %d", resp.StatusCode, body, tc.healthz)
			}
			if strings.Contains(body, "nodeEligible") != (tc.healthz == 503) {
				t.Errorf("/healthz body: %s", body)
			}
			resp, body = get(t, ext.Net(), fmt.Sprintf("http://%s:%d/livez", ip, HealthzPort))
			if resp.StatusCode != tc.livz {
				t.Errorf("/livez: %d %s, want %d", resp.StatusCode, body, tc.livz)
			}
		})
	}
}
