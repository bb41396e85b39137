package dns

import (
	"fmt"
	"testing"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/service"
)

const storeManifests = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: pg, port: 5432}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: shop, labels: {app: web}}
spec: {containers: [{name: c, image: nginx, ports: [{containerPort: 8080}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: shop, labels: {app: db}}
spec: {hostname: db-0, subdomain: db, containers: [{name: c, image: postgres}]}
`

// readyPod gives pod an IP and a Ready condition through the status subresource.
func readyPod(t *testing.T, st *service.Store, name, ip string) {
	t.Helper()
	pod, ok := st.GetPod("shop", name)
	if !ok {
		t.Fatalf("pod %s missing", name)
	}
	pod = pod.DeepCopy()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := st.UpdateStatus(pod); err != nil {
		t.Fatal(err)
	}
}

// TestServiceStoreSource serves from the simulation's API server: allocated
// cluster IPs, controller-made EndpointSlices, and changes seen through Watch.
func TestServiceStoreSource(t *testing.T) {
	st, err := service.NewStore(service.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := service.Load("shop.yaml", []byte(storeManifests))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ApplyManifests(ms); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Now = testClock()
	s, err := New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	web, _ := st.GetService("shop", "web")
	webIP := web.Spec.ClusterIP

	ask := func(c dnsCase) { t.Helper(); check(t, c, direct(s, c.msg(), "udp")) }
	ask(dnsCase{qname: "web.shop.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"web.shop.svc.cluster.local. 5 IN A " + webIP}})
	// No pod is ready yet: the headless service has no ready endpoint.
	ask(dnsCase{qname: "db.shop.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}})

	readyPod(t, st, "web-1", "10.244.1.5")
	readyPod(t, st, "db-0", "10.244.2.7")
	if s.Serial() <= fixedSerial {
		t.Errorf("serial %d did not move after store changes", s.Serial())
	}
	ask(dnsCase{qname: "db.shop.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"db.shop.svc.cluster.local. 5 IN A 10.244.2.7"}})
	ask(dnsCase{qname: "db-0.db.shop.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"db-0.db.shop.svc.cluster.local. 5 IN A 10.244.2.7"}})
	ask(dnsCase{qname: "_http._tcp.web.shop.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{"_http._tcp.web.shop.svc.cluster.local. 5 IN SRV 0 100 80 web.shop.svc.cluster.local."},
		extra:  []string{"web.shop.svc.cluster.local. 5 IN A " + webIP}})
	ask(dnsCase{qname: "5.1.244.10.in-addr.arpa.", qtype: mdns.TypePTR,
		answer: []string{"5.1.244.10.in-addr.arpa. 5 IN PTR 10-244-1-5.web.shop.svc.cluster.local."}})

	if err := st.Delete(service.KindService, "shop", "web"); err != nil {
		t.Fatal(err)
	}
	ask(dnsCase{qname: "web.shop.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError,
		ns: []string{fmt.Sprintf("cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. %d 7200 1800 86400 5", s.Serial())}})
}
