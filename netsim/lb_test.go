package netsim

import (
	"net/netip"
	"testing"

	"github.com/clusterlab/clusterlab/service"
)

// spec.loadBalancerIP is honoured: the load balancer takes that address (not the pool's
// next), publishes it in the Service's status, and answers on it.
func TestLoadBalancerIPHonoured(t *testing.T) {
	c := kubeCluster(t, Config{})
	ext, err := c.AddExternalHost("client", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	svc := myService(service.LoadBalancer())
	svc.Spec.LoadBalancerIP = "198.51.100.77"
	if err := c.Apply(svc); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	got, _ := c.Store().GetService("default", "my-service")
	if ing := got.Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != "198.51.100.77" {
		t.Fatalf("load balancer status: %+v, want 198.51.100.77", got.Status.LoadBalancer)
	}
	if ip, ok := c.LoadBalancerIP("default", "my-service"); !ok || ip != netip.MustParseAddr("198.51.100.77") {
		t.Errorf("LoadBalancerIP: %s %v", ip, ok)
	}
	w, err := ask(t, ext.Net(), "198.51.100.77:80")
	if err != nil || w.Pod != "default/web-0" {
		t.Errorf("traffic to the requested address: %+v %v", w, err)
	}
}
