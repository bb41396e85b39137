// Command networkpolicy-clusterip-ipblock shows where NetworkPolicy meets kube-proxy: an
// egress ipBlock naming a Service's ClusterIP never matches, because the CNI checks
// policy after kube-proxy's DNAT (it sees the backend pod's IP and target port); and a
// NodePort hop with externalTrafficPolicy Cluster masquerades the client, so an
// ingress ipBlock naming the client stops matching on the backend's node.
package main

import (
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// egressTo is the client's egress policy: to the given peer on the given port.
func egressTo(peer networkingv1.NetworkPolicyPeer, port int) *networkingv1.NetworkPolicy {
	p := intstr.FromInt(port)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "client-egress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{peer}, Ports: []networkingv1.NetworkPolicyPort{{Port: &p}}}},
		},
	}
}

func run(w io.Writer) error {
	c, err := cluster.New(cluster.Config{Seed: 1, ManualClock: true,
		Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}},
		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables})})
	if err != nil {
		return err
	}
	defer c.Close()
	laptop, err := c.AddExternalHost("laptop", netip.Addr{})
	if err != nil {
		return err
	}
	err = c.Apply(service.NewService("default/web", service.Selector("app=web"), service.Port("", 80, 8080), service.ClusterIP("10.96.0.80"),
		service.NodePort(), service.WithNodePort("", 30080), service.ExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyCluster)))
	if err != nil {
		return err
	}
	for _, p := range []*corev1.Pod{
		service.NewPod("default/web-0", service.Labels("app=web"), service.ContainerPort("", 8080, corev1.ProtocolTCP), service.OnNode("node-b")),
		service.NewPod("default/client", service.Labels("app=client"), service.OnNode("node-a")),
	} {
		if _, err := c.CreatePod(p); err != nil {
			return err
		}
	}
	probe := func(from string, dst netip.AddrPort) (netsim.ProbeResult, error) {
		return c.ProbeOne(netsim.Probe{From: from, Proto: netfilter.ProtoTCP, Dst: dst, Mode: netsim.ProbeConnect})
	}
	say := func(what string, r netsim.ProbeResult) {
		if r.Result == netsim.ResultConnected {
			fmt.Fprintf(w, "%s: connected to %s (it saw %s)\n", what, r.Pod, r.SeenSrc.Addr())
			return
		}
		fmt.Fprintf(w, "%s: %s (%s)\n", what, r.Result, r.Reason)
	}
	vip := netip.MustParseAddrPort("10.96.0.80:80")

	// 1. The gotcha: the ClusterIP in an egress ipBlock.
	if err := c.Apply(egressTo(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.96.0.80/32"}}, 80)); err != nil {
		return err
	}
	r, err := probe("pod:default/client", vip)
	if err != nil {
		return err
	}
	say("egress ipBlock 10.96.0.80/32 port 80, client -> web's ClusterIP", r)

	// 2. The fix: the backends by label, on their target port.
	if err := c.Apply(egressTo(networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}, 8080)); err != nil {
		return err
	}
	if r, err = probe("pod:default/client", vip); err != nil {
		return err
	}
	say("egress podSelector app=web port 8080, client -> web's ClusterIP", r)

	// 3. An ingress ipBlock naming the laptop, through the NodePort on each node.
	webFromLaptop := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-from-laptop"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(laptop.IP(), 32).String()}}}}},
		},
	}
	if err := c.Apply(webFromLaptop); err != nil {
		return err
	}
	for _, node := range []string{"node-b", "node-a"} {
		if r, err = probe("external:laptop", netip.AddrPortFrom(c.Node(node).IP(), 30080)); err != nil {
			return err
		}
		say(fmt.Sprintf("ingress ipBlock %s/32, laptop -> NodePort on %s", laptop.IP(), node), r)
	}
	return nil
}
