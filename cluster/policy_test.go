package cluster

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netpol"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
)

func policyPod(name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "app", Image: "whoami",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		}}},
	}
}

// policyCluster is two nodes with default/web (app=web, port 8080 named http) and
// default/other on node-a and default/client (app=client) on node-b.
func policyCluster(t *testing.T, flavour string) (*Cluster, netip.Addr) {
	t.Helper()
	c := newTestCluster(t, Config{Seed: 1, Nodes: []NodeConfig{{Name: "node-a", NetworkPolicy: flavour}, {Name: "node-b", NetworkPolicy: flavour}}})
	for _, p := range []*corev1.Pod{
		policyPod("web", "node-a", map[string]string{"app": "web"}),
		policyPod("other", "node-a", map[string]string{"app": "other"}),
		policyPod("client", "node-b", map[string]string{"app": "client"}),
	} {
		if _, err := c.CreatePod(p); err != nil {
			t.Fatal(err)
		}
	}
	web := c.Pod("default", "web")
	if web == nil {
		t.Fatal("default/web did not start")
	}
	return c, web.IP()
}

func allowFrom(name string, peers ...networkingv1.NetworkPolicyPeer) *networkingv1.NetworkPolicy {
	port := intstr.FromString("http")
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: peers, Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}},
		},
	}
}

func polConnect(t *testing.T, c *Cluster, from string, dst netip.AddrPort) netsim.ProbeResult {
	t.Helper()
	res, err := c.Probe(netsim.Probe{From: from, Proto: netfilter.ProtoTCP, Dst: dst, Mode: netsim.ProbeConnect, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("%d outcomes", len(res))
	}
	return res[0]
}

func TestNetworkPolicyIngressByPodSelector(t *testing.T) {
	c, web := policyCluster(t, "")
	dst := netip.AddrPortFrom(web, 8080)
	// No policy: everyone connects, and the datapath has no policy handler at all.
	if r := polConnect(t, c, "pod:default/other", dst); r.Result != netsim.ResultConnected {
		t.Fatalf("before any policy: %s", r.Outcome)
	}
	if strings.Contains(polConnect(t, c, "pod:default/client", dst).Trace.String(), PolicyHandlerName) {
		t.Error("a cluster without NetworkPolicies traced the policy handler")
	}
	if err := c.Apply(allowFrom("allow-client", networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}})); err != nil {
		t.Fatal(err)
	}
	r := polConnect(t, c, "pod:default/client", dst)
	if r.Result != netsim.ResultConnected {
		t.Fatalf("client (allowed by rule 0): %s\n%s", r.Outcome, r.Trace)
	}
	if tr := r.Trace.String(); !strings.Contains(tr, "allowed by default/allow-client ingress rule 0") {
		t.Errorf("the allowed connection's trace does not name the rule:\n%s", tr)
	}
	r = polConnect(t, c, "pod:default/other", dst)
	if r.Result != netsim.ResultDropped || !strings.HasPrefix(r.Reason, "dropped by NetworkPolicy at POSTROUTING: pod default/web is isolated for ingress (policies: default/allow-client); no rule allows it") {
		t.Fatalf("other (same node, not allowed): %s\n%s", r.Outcome, r.Trace)
	}
	// The structured decision rides on the trace step.
	var found bool
	for _, s := range r.Trace.Steps {
		if pt, ok := s.Decision.(*PolicyTrace); ok && pt.Decision.Pod == "default/web" && !pt.Allowed && pt.Decision.Direction == netpol.Ingress &&
			pt.Direction == "ingress" && len(pt.Selecting) == 1 && pt.Selecting[0] == "default/allow-client" {
			found = true
		}
	}
	if !found {
		t.Errorf("no denying PolicyTrace on the trace:\n%s", r.Trace)
	}
	// A named port matches only its number: 8081 is not "http".
	if r := polConnect(t, c, "pod:default/client", netip.AddrPortFrom(web, 8081)); r.Result != netsim.ResultDropped {
		t.Errorf("client to port 8081 (not the named port http): %s", r.Outcome)
	}
	// The local host reaches its pods whatever the policy (kubelet's probes); another
	// node is an address no rule allows.
	if r := polConnect(t, c, "node:node-a", dst); r.Result != netsim.ResultConnected {
		t.Errorf("node-a (web's own node): %s\n%s", r.Outcome, r.Trace)
	}
	if r := polConnect(t, c, "node:node-b", dst); r.Result != netsim.ResultDropped {
		t.Errorf("node-b (another node, no rule): %s", r.Outcome)
	}
	// Deleting the policy lifts the isolation.
	if err := c.Store().Delete(service.KindNetworkPolicy, "default", "allow-client"); err != nil {
		t.Fatal(err)
	}
	if r := polConnect(t, c, "pod:default/other", dst); r.Result != netsim.ResultConnected {
		t.Errorf("after the policy's deletion: %s", r.Outcome)
	}
}

// TestNetworkPolicyNodeFlavours: an ipBlock naming another node's address lets that
// node in with Calico (an address like any other) but not with Cilium (remote-node
// identity, which CIDR rules do not select).
func TestNetworkPolicyNodeFlavours(t *testing.T) {
	for _, tc := range []struct {
		flavour string
		want    string
	}{{PolicyCalico, netsim.ResultConnected}, {PolicyCilium, netsim.ResultDropped}} {
		t.Run(tc.flavour, func(t *testing.T) {
			c, web := policyCluster(t, tc.flavour)
			nodeB := c.Node("node-b").IP()
			pol := allowFrom("allow-node-b", networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(nodeB, 32).String()}})
			if err := c.Apply(pol); err != nil {
				t.Fatal(err)
			}
			if r := polConnect(t, c, "node:node-b", netip.AddrPortFrom(web, 8080)); r.Result != tc.want {
				t.Errorf("node-b to web under %s: %s, want %s\n%s", tc.flavour, r.Outcome, tc.want, r.Trace)
			}
			if r := polConnect(t, c, "node:node-a", netip.AddrPortFrom(web, 8080)); r.Result != netsim.ResultConnected {
				t.Errorf("node-a (local host) to web under %s: %s", tc.flavour, r.Outcome)
			}
		})
	}
}

// TestNetworkPolicyEgressAndEstablished: an egress default-deny stops new connections
// of the pod, while the replies of a connection it opened before keep flowing.
func TestNetworkPolicyEgressAndEstablished(t *testing.T) {
	c, web := policyCluster(t, "")
	client := c.Pod("default", "client")
	conn, err := client.Net().Dial("tcp", netip.AddrPortFrom(web, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) // a stateless handler would drop the reply
	denyEgress := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "deny-egress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		},
	}
	if err := c.Apply(denyEgress); err != nil {
		t.Fatal(err)
	}
	r := polConnect(t, c, "pod:default/client", netip.AddrPortFrom(web, 8080))
	if r.Result != netsim.ResultDropped || !strings.Contains(r.Reason, "pod default/client is isolated for egress (policies: default/deny-egress)") {
		t.Fatalf("a new connection under the egress deny: %s\n%s", r.Outcome, r.Trace)
	}
	// The connection opened before the policy still works both ways.
	if _, err := conn.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("the established connection's reply: %v", err)
	}
	if w, err := netsim.ParseWhoami(string(buf[:n])); err != nil || w.Pod != "default/web" {
		t.Errorf("the established connection's answer %q (%v)", buf[:n], err)
	}
}

// BenchmarkPolicyProbe: a pod-to-pod TCP handshake through the datapath (a probe) with
// no NetworkPolicy, with the one that selects the server, and with that one among 1,000
// policies of other namespaces: the handler's cost does not grow with policies that do
// not select the pods.
func BenchmarkPolicyProbe(b *testing.B) {
	for _, tc := range []struct {
		name      string
		policies  bool
		unrelated int
	}{{"none", false, 0}, {"selecting", true, 0}, {"selecting+1000-unrelated", true, 1000}} {
		b.Run(tc.name, func(b *testing.B) {
			c := newTestCluster(b, Config{Seed: 1, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
			for _, p := range []*corev1.Pod{policyPod("web", "node-a", map[string]string{"app": "web"}), policyPod("client", "node-b", map[string]string{"app": "client"})} {
				if _, err := c.CreatePod(p); err != nil {
					b.Fatal(err)
				}
			}
			if tc.policies {
				if err := c.Apply(allowFrom("allow-client", networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}})); err != nil {
					b.Fatal(err)
				}
			}
			for i := range tc.unrelated {
				p := allowFrom(fmt.Sprintf("other-%d", i))
				p.Namespace = fmt.Sprintf("ns-%d", i%50)
				p.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", i)}}
				if err := c.Apply(p); err != nil {
					b.Fatal(err)
				}
			}
			dst := netip.AddrPortFrom(c.Pod("default", "web").IP(), 8080)
			probe := netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: dst, Mode: netsim.ProbeConnect}
			b.ResetTimer()
			for range b.N {
				r, err := c.ProbeOne(probe)
				if err != nil || r.Result != netsim.ResultConnected {
					b.Fatalf("%v %v", r.Outcome, err)
				}
			}
		})
	}
}

// TestNetworkPolicyHostNetworkAndExternal: a hostNetwork pod is no pod for policy (its
// traffic is its node's, which a podSelector does not match), and an egress ipBlock of
// the external network is matched before the CNI's masquerade rewrites the source.
func TestNetworkPolicyHostNetworkAndExternal(t *testing.T) {
	c, web := policyCluster(t, "")
	hn := policyPod("agent", "node-b", map[string]string{"app": "client"})
	hn.Spec.HostNetwork = true
	if _, err := c.CreatePod(hn); err != nil {
		t.Fatal(err)
	}
	ext, err := c.AddExternalHost("api", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(allowFrom("allow-client", networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}})); err != nil {
		t.Fatal(err)
	}
	if r := polConnect(t, c, "pod:default/agent", netip.AddrPortFrom(web, 8080)); r.Result != netsim.ResultDropped {
		t.Errorf("hostNetwork pod labelled app=client (its node's address for policy): %s", r.Outcome)
	}
	egress := func(cidr string) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "client-out"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}}},
			},
		}
	}
	dst := netip.AddrPortFrom(ext.IP(), 443)
	if err := c.Apply(egress(netip.PrefixFrom(ext.IP(), 32).String())); err != nil {
		t.Fatal(err)
	}
	packet := func() netsim.ProbeResult {
		r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: dst, Mode: netsim.ProbePacket})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := packet(); r.Result != netsim.ResultDelivered || r.SeenSrc.Addr() != c.Node("node-b").IP() {
		t.Errorf("client to the external host its ipBlock allows (masqueraded after the check): %s", r.Outcome)
	}
	if err := c.Apply(egress("192.0.2.0/24")); err != nil {
		t.Fatal(err)
	}
	if r := packet(); r.Result != netsim.ResultDropped {
		t.Errorf("client to an external host outside its ipBlock: %s", r.Outcome)
	}
}
