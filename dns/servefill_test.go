package dns

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/clusterlab/clusterlab/alloc"
	"github.com/clusterlab/clusterlab/service"
)

// handWritten is what a person writes before `kubectl apply`: no cluster IPs,
// no EndpointSlices, pods with their status as the kubelet reports it.
const handWritten = `apiVersion: v1
kind: Service
metadata: {name: my-service}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 9376}]
---
apiVersion: v1
kind: Service
metadata: {name: dual, namespace: shop}
spec:
  ipFamilyPolicy: RequireDualStack
  ports: [{port: 443}]
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: pg, port: 5432}]
---
apiVersion: v1
kind: Service
metadata: {name: given}
spec:
  clusterIP: 10.0.0.42
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: sliced}
spec:
  selector: {app: web}
  clusterIP: 10.0.0.43
  ports: [{port: 80}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: sliced-1
  labels: {kubernetes.io/service-name: sliced}
addressType: IPv4
endpoints: [{addresses: [10.1.1.1]}]
ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: ext}
spec:
  type: ExternalName
  externalName: example.com
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, labels: {app: web}}
spec:
  containers: [{name: c, image: x, ports: [{containerPort: 9376}]}]
status:
  podIP: 10.244.1.5
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, labels: {app: web}}
spec:
  containers: [{name: c, image: x}]
status:
  podIP: 10.244.2.6
  conditions: [{type: Ready, status: "False"}]
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, labels: {app: db}}
spec:
  hostname: db-0
  subdomain: db
  containers: [{name: c, image: x}]
status:
  podIP: 10.244.1.9
  conditions: [{type: Ready, status: "True"}]
`

func loadText(t *testing.T, text string) []runtime.Object {
	t.Helper()
	ms, err := service.Load("test.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return service.Objects(ms)
}

// allocated returns the cluster IPs completeObjects gave each service.
func allocated(t *testing.T, objs []runtime.Object) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, o := range objs {
		if svc, ok := o.(*corev1.Service); ok {
			out[nsOrDefault(svc.Namespace)+"/"+svc.Name] = alloc.ClusterIPsOf(svc)
		}
	}
	return out
}

func TestCompleteObjectsClusterIPs(t *testing.T) {
	in := loadText(t, handWritten)
	out, notes := completeObjects(in)
	ips := allocated(t, out)

	v4, err := alloc.NewIPAllocator(ServeServiceCIDRv4, nil)
	if err != nil {
		t.Fatal(err)
	}
	my := ips["default/my-service"]
	if len(my) != 1 {
		t.Fatalf("my-service: cluster IPs %v, want one", my)
	}
	ip := netip.MustParseAddr(my[0])
	if !ServeServiceCIDRv4.Contains(ip) || v4.InStaticBand(ip) {
		t.Errorf("my-service got %s: want an address of %s's dynamic band", ip, ServeServiceCIDRv4)
	}
	if d := ips["shop/dual"]; len(d) != 2 || !netip.MustParseAddr(d[0]).Is4() || !ServeServiceCIDRv6.Contains(netip.MustParseAddr(d[1])) {
		t.Errorf("RequireDualStack service: cluster IPs %v, want IPv4 then IPv6 from %s", d, ServeServiceCIDRv6)
	}
	for svc, want := range map[string][]string{
		"default/db": {}, "default/ext": {}, "default/given": {"10.0.0.42"}, "default/sliced": {"10.0.0.43"},
	} {
		if got := ips[svc]; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: cluster IPs %v, want %v (as in the manifests)", svc, got, want)
		}
	}
	for _, o := range in {
		if svc, ok := o.(*corev1.Service); ok && svc.Name == "my-service" && svc.Spec.ClusterIP != "" {
			t.Errorf("completeObjects changed its input")
		}
	}
	if !containsSubstring(notes, "default/my-service has no clusterIP in the manifests: given "+my[0]) {
		t.Errorf("notes %q do not say what was allocated", notes)
	}

	// The same file gives the same addresses; another service does not move
	// them; an address the manifests give is never handed out.
	again, _ := completeObjects(loadText(t, handWritten))
	if got := allocated(t, again); strings.Join(got["default/my-service"], ",") != my[0] {
		t.Errorf("reloading the same file moved my-service from %s to %v", my[0], got["default/my-service"])
	}
	more := handWritten + "---\napiVersion: v1\nkind: Service\nmetadata: {name: aaa}\nspec: {ports: [{port: 1}]}\n" +
		"---\napiVersion: v1\nkind: Service\nmetadata: {name: pinned}\nspec: {clusterIP: " + my[0] + ", ports: [{port: 1}]}\n"
	moved, _ := completeObjects(loadText(t, more))
	got := allocated(t, moved)
	if g := got["default/my-service"]; len(g) != 1 || g[0] == my[0] {
		t.Errorf("my-service got %v although the manifests give %s to default/pinned", g, my[0])
	}
	if a := got["default/aaa"]; len(a) != 1 || a[0] == my[0] {
		t.Errorf("aaa got %v", a)
	}
}

func containsSubstring(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestServeHandWrittenManifest: `dns serve` on a file without cluster IPs or
// EndpointSlices answers as the cluster it would make.
func TestServeHandWrittenManifest(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(file, []byte(handWritten), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startServe(t, file)
	out, _ := completeObjects(loadText(t, handWritten))
	vip := allocated(t, out)["default/my-service"][0]
	if got := r.a(t, "my-service.default.svc.cluster.local."); strings.Join(got, ",") != vip {
		t.Errorf("my-service: A %v, want the allocated %s", got, vip)
	}
	if !strings.Contains(r.log.String(), "has no clusterIP in the manifests: given "+vip) || !strings.Contains(r.log.String(), "1 endpoints derived") {
		t.Errorf("log does not say what was filled in:\n%s", r.log.String())
	}
	q := func(name string, qtype uint16) *mdns.Msg {
		m := new(mdns.Msg)
		m.SetQuestion(name, qtype)
		return exchange(t, "udp", r.udp, m)
	}
	rev := ReverseName(netip.MustParseAddr(vip))
	soa := soaLineSerial("cluster.local.", 5, q("cluster.local.", mdns.TypeSOA))
	for _, c := range []dnsCase{
		// Endpoints from the ready pod that matches (web-0), with the
		// resolved targetPort; the not-ready web-1 is left out.
		{qname: "_http._tcp.my-service.default.svc.cluster.local.", qtype: mdns.TypeSRV,
			answer: []string{"_http._tcp.my-service.default.svc.cluster.local. 5 IN SRV 0 100 80 my-service.default.svc.cluster.local."},
			extra:  []string{"my-service.default.svc.cluster.local. 5 IN A " + vip}},
		{qname: "10-244-1-5.my-service.default.svc.cluster.local.", qtype: mdns.TypeA,
			answer: []string{"10-244-1-5.my-service.default.svc.cluster.local. 5 IN A 10.244.1.5"}},
		{qname: "10-244-2-6.my-service.default.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{qname: rev, qtype: mdns.TypePTR, answer: []string{rev + " 5 IN PTR my-service.default.svc.cluster.local."}},
		// A headless service's pod with hostname and subdomain.
		{qname: "db.default.svc.cluster.local.", qtype: mdns.TypeA,
			answer: []string{"db.default.svc.cluster.local. 5 IN A 10.244.1.9"}},
		{qname: "_pg._tcp.db.default.svc.cluster.local.", qtype: mdns.TypeSRV,
			answer: []string{"_pg._tcp.db.default.svc.cluster.local. 5 IN SRV 0 100 5432 db-0.db.default.svc.cluster.local."},
			extra:  []string{"db-0.db.default.svc.cluster.local. 5 IN A 10.244.1.9"}},
		// The manifests' own slice wins: nothing derived for "sliced".
		{qname: "sliced.default.svc.cluster.local.", qtype: mdns.TypeA,
			answer: []string{"sliced.default.svc.cluster.local. 5 IN A 10.0.0.43"}},
		{qname: "10-244-1-5.sliced.default.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
		{qname: "10-1-1-1.sliced.default.svc.cluster.local.", qtype: mdns.TypeA,
			answer: []string{"10-1-1-1.sliced.default.svc.cluster.local. 5 IN A 10.1.1.1"}},
	} {
		check(t, c, q(c.qname, c.qtype))
	}
}

// soaLineSerial is soaLine with the serial of a live server's SOA reply.
func soaLineSerial(zone string, ttl uint32, resp *mdns.Msg) string {
	serial := uint32(0)
	if len(resp.Answer) == 1 {
		if s, ok := resp.Answer[0].(*mdns.SOA); ok {
			serial = s.Serial
		}
	}
	return strings.Replace(soaLine(zone, ttl), fmt.Sprintf(" %d ", fixedSerial), fmt.Sprintf(" %d ", serial), 1)
}
