package proptest

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netpol"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
)

// NetworkPolicy in the property kit: PolicyCases draws namespaces, pods (each behind a
// Service of its own) and NetworkPolicies of every v1 feature; CheckPolicyReachability
// builds the case under a kube-proxy mode and holds the simulation's reachability of
// every pod pair (a packet sent through the datapath, to the pod's IP and through its
// Service's ClusterIP) to netpol.Reference, the direct evaluation of the semantics.
//
//	PolicyCases() ──draw──▶ *PolicyCase (nodes, namespaces, pods, policies)
//	                            │ BuildPolicy(case, mode)
//	                            ▼
//	  cluster.Cluster with kube-proxy's mode and the NetworkPolicy handler on each node
//	                            │ CheckPolicyReachability
//	                            ▼
//	  for every ordered pair of distinct pods, every probe port: probe (ProbePacket)
//	  delivered? == netpol.Reference(policies, namespaces, pods, src, dst, port after DNAT)

// PolicyPorts are the ports every generated pod serves: http 80/TCP (named), 81/TCP
// (unnamed: endPort ranges and unnamed ports meet it) and dns 53/UDP (named).
var PolicyPorts = []corev1.ContainerPort{
	{Name: "http", ContainerPort: 80, Protocol: corev1.ProtocolTCP},
	{ContainerPort: 81, Protocol: corev1.ProtocolTCP},
	{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
}

// policyServicePort is the Service port in front of each pod port: port+8000.
const policyServicePort = 8000

// PolicyCase is a drawn NetworkPolicy case.
type PolicyCase struct {
	Nodes      []string
	Namespaces []*corev1.Namespace
	Pods       []*corev1.Pod
	Policies   []*networkingv1.NetworkPolicy
}

// String lists the case for a failure message.
func (c *PolicyCase) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nodes %v\n", c.Nodes)
	for _, n := range c.Namespaces {
		fmt.Fprintf(&b, "namespace %s %v\n", n.Name, n.Labels)
	}
	for _, p := range c.Pods {
		fmt.Fprintf(&b, "pod %s/%s on %s %v\n", p.Namespace, p.Name, p.Spec.NodeName, p.Labels)
	}
	for _, p := range c.Policies {
		fmt.Fprintf(&b, "policy %s/%s select %s types %v\n", p.Namespace, p.Name, netpol.SelectorText(&p.Spec.PodSelector), p.Spec.PolicyTypes)
		for i := range p.Spec.Ingress {
			fmt.Fprintf(&b, "  %s\n", netpol.RuleText(netpol.Ingress, &p.Spec.Ingress[i], nil))
		}
		for i := range p.Spec.Egress {
			fmt.Fprintf(&b, "  %s\n", netpol.RuleText(netpol.Egress, nil, &p.Spec.Egress[i]))
		}
	}
	return b.String()
}

var (
	policyNamespaces = []string{"x", "y", "z"}
	policyApps       = []string{"a", "b", "c"}
	// policyCIDRs are ipBlocks around the pod networks (node i's pods are 10.244.i.0/24).
	policyCIDRs = []networkingv1.IPBlock{
		{CIDR: "10.244.0.0/16"},
		{CIDR: "10.244.0.0/24"},
		{CIDR: "10.244.1.0/24"},
		{CIDR: "10.244.0.0/16", Except: []string{"10.244.1.0/24"}},
		{CIDR: "0.0.0.0/0", Except: []string{"10.244.0.0/24"}},
		{CIDR: "203.0.113.0/24"},
	}
)

// PolicyCases draws NetworkPolicy cases: one to three nodes; namespaces x, y and z
// labelled ns=NAME (and now and then team=t); two to five pods with app labels a, b, c
// on any node; zero to four policies with podSelectors (empty or by app),
// policyTypes given or defaulted, ingress and egress lists absent, empty or with
// rules of peers (podSelector, namespaceSelector, both, ipBlock with except, none) and
// ports (numeric, named, endPort ranges, TCP or UDP, none).
func PolicyCases() *rapid.Generator[*PolicyCase] {
	return rapid.Custom(drawPolicyCase)
}

func drawPolicyCase(t *rapid.T) *PolicyCase {
	c := &PolicyCase{}
	for i := range rapid.IntRange(1, 3).Draw(t, "nodes") {
		c.Nodes = append(c.Nodes, fmt.Sprintf("node-%c", 'a'+i))
	}
	for _, ns := range policyNamespaces {
		labels := map[string]string{"ns": ns}
		if rapid.Bool().Draw(t, "team-"+ns) {
			labels["team"] = "t"
		}
		c.Namespaces = append(c.Namespaces, service.NewNamespace(ns, service.Labels(labelString(labels))))
	}
	for i := range rapid.IntRange(2, 5).Draw(t, "pods") {
		ns := rapid.SampledFrom(policyNamespaces).Draw(t, "pod-ns")
		app := rapid.SampledFrom(policyApps).Draw(t, "pod-app")
		node := rapid.SampledFrom(c.Nodes).Draw(t, "pod-node")
		pod := service.NewPod(fmt.Sprintf("%s/p%d", ns, i), service.Labels("app="+app+",pt-id=p"+fmt.Sprint(i)), service.OnNode(node))
		pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "whoami", Ports: append([]corev1.ContainerPort(nil), PolicyPorts...)}}
		c.Pods = append(c.Pods, pod)
	}
	for i := range rapid.IntRange(0, 4).Draw(t, "policies") {
		c.Policies = append(c.Policies, drawPolicy(t, fmt.Sprintf("np%d", i)))
	}
	return c
}

func labelString(m map[string]string) string {
	var parts []string
	for _, k := range []string{"ns", "team"} {
		if v, ok := m[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ",")
}

func drawAppSelector(t *rapid.T, label string) *metav1.LabelSelector {
	switch rapid.IntRange(0, 2).Draw(t, label) {
	case 0:
		return &metav1.LabelSelector{}
	case 1:
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": rapid.SampledFrom(policyApps).Draw(t, label+"-app")}}
	}
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn,
		Values: []string{rapid.SampledFrom(policyApps).Draw(t, label+"-in")}}}}
}

func drawNSSelector(t *rapid.T) *metav1.LabelSelector {
	switch rapid.IntRange(0, 2).Draw(t, "ns-sel") {
	case 0:
		return &metav1.LabelSelector{}
	case 1:
		return &metav1.LabelSelector{MatchLabels: map[string]string{"ns": rapid.SampledFrom(policyNamespaces).Draw(t, "ns-sel-ns")}}
	}
	return &metav1.LabelSelector{MatchLabels: map[string]string{"team": "t"}}
}

func drawPeers(t *rapid.T) []networkingv1.NetworkPolicyPeer {
	var peers []networkingv1.NetworkPolicyPeer
	for range rapid.IntRange(0, 2).Draw(t, "peers") {
		var p networkingv1.NetworkPolicyPeer
		switch rapid.IntRange(0, 3).Draw(t, "peer-kind") {
		case 0:
			p.PodSelector = drawAppSelector(t, "peer-pods")
		case 1:
			p.NamespaceSelector = drawNSSelector(t)
		case 2:
			p.PodSelector, p.NamespaceSelector = drawAppSelector(t, "peer-pods"), drawNSSelector(t)
		case 3:
			b := rapid.SampledFrom(policyCIDRs).Draw(t, "ipblock")
			p.IPBlock = &b
		}
		peers = append(peers, p)
	}
	return peers
}

func drawPorts(t *rapid.T) []networkingv1.NetworkPolicyPort {
	var ports []networkingv1.NetworkPolicyPort
	for range rapid.IntRange(0, 2).Draw(t, "ports") {
		var p networkingv1.NetworkPolicyPort
		proto := rapid.SampledFrom([]corev1.Protocol{"", corev1.ProtocolTCP, corev1.ProtocolUDP}).Draw(t, "port-proto")
		if proto != "" {
			p.Protocol = &proto
		}
		switch rapid.IntRange(0, 4).Draw(t, "port-kind") {
		case 0: // every port of the protocol
		case 1:
			v := intstr.FromInt32(rapid.SampledFrom([]int32{53, 80, 81}).Draw(t, "port-num"))
			p.Port = &v
		case 2:
			v := intstr.FromString(rapid.SampledFrom([]string{"http", "dns"}).Draw(t, "port-name"))
			p.Port = &v
		case 3:
			v := intstr.FromInt32(80)
			end := rapid.SampledFrom([]int32{80, 81, 100}).Draw(t, "end-port")
			p.Port, p.EndPort = &v, &end
		case 4:
			v := intstr.FromInt32(50)
			end := int32(60)
			p.Port, p.EndPort = &v, &end
		}
		ports = append(ports, p)
	}
	return ports
}

func drawPolicy(t *rapid.T, name string) *networkingv1.NetworkPolicy {
	ns := rapid.SampledFrom(policyNamespaces).Draw(t, "policy-ns")
	p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	p.Spec.PodSelector = *drawAppSelector(t, "policy-pods")
	switch rapid.IntRange(0, 3).Draw(t, "policy-types") {
	case 1:
		p.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 2:
		p.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	case 3:
		p.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	// Each list absent (nil), empty ([]: no rule) or with rules; a rule's from/to and
	// ports absent (all) or listed.
	switch rapid.IntRange(0, 2).Draw(t, "ingress") {
	case 1:
		p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{}
	case 2:
		for range rapid.IntRange(1, 2).Draw(t, "ingress-rules") {
			p.Spec.Ingress = append(p.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: drawPeers(t), Ports: drawPorts(t)})
		}
	}
	switch rapid.IntRange(0, 2).Draw(t, "egress") {
	case 1:
		p.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{}
	case 2:
		for range rapid.IntRange(1, 2).Draw(t, "egress-rules") {
			p.Spec.Egress = append(p.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: drawPeers(t), Ports: drawPorts(t)})
		}
	}
	return p
}

// PolicyModes are the kube-proxy modes the policy invariant holds for: every
// registered mode but those that terminate connections on the node (Semantics.
// Terminates: the userspace proxy opens its own connection to the backend from the
// node, so the backend's ingress policy sees the node, not the pod, by design, as on
// a real cluster).
func PolicyModes() []kubeproxy.Mode {
	var out []kubeproxy.Mode
	for _, m := range kubeproxy.Modes() {
		info, _ := kubeproxy.Lookup(m)
		if !info.Semantics.Terminates {
			out = append(out, m)
		}
	}
	return out
}

// PolicyWorld is a PolicyCase running on a cluster.
type PolicyWorld struct {
	Case    *PolicyCase
	Mode    kubeproxy.Mode
	Cluster *cluster.Cluster
}

// Close stops the cluster.
func (w *PolicyWorld) Close() { w.Cluster.Close() }

// BuildPolicy builds the case's cluster under the mode: its namespaces, a Service per
// pod (port 8000+P to each pod port P), the pods, then the policies.
func BuildPolicy(c *PolicyCase, mode kubeproxy.Mode) (*PolicyWorld, error) {
	cfg := cluster.Config{Seed: 1, ManualClock: true, NoAPIServer: true, Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: mode})}
	for _, n := range c.Nodes {
		cfg.Nodes = append(cfg.Nodes, cluster.NodeConfig{Name: n})
	}
	cl, err := cluster.New(cfg)
	if err != nil {
		return nil, err
	}
	w := &PolicyWorld{Case: c, Mode: mode, Cluster: cl}
	var objs []runtime.Object
	for _, n := range c.Namespaces {
		objs = append(objs, n.DeepCopy())
	}
	for _, p := range c.Pods {
		opts := []service.Option{service.Selector("pt-id=" + p.Labels["pt-id"])}
		for _, cp := range PolicyPorts {
			opts = append(opts, service.ProtocolPort(fmt.Sprintf("p%d", cp.ContainerPort), cp.Protocol, policyServicePort+cp.ContainerPort, cp.ContainerPort))
		}
		objs = append(objs, service.NewService(p.Namespace+"/svc-"+p.Name, opts...))
	}
	if err := cl.Apply(objs...); err != nil {
		cl.Close()
		return nil, fmt.Errorf("apply: %w", err)
	}
	for _, p := range c.Pods {
		if _, err := cl.CreatePod(p.DeepCopy()); err != nil {
			cl.Close()
			return nil, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	for _, p := range c.Policies {
		if err := cl.Apply(p.DeepCopy()); err != nil {
			cl.Close()
			return nil, fmt.Errorf("policy %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	cl.SyncProxies()
	return w, nil
}

// CheckPolicyReachability sends a packet from every pod to every other pod, on each
// pod port to the pod's IP and on each Service port to its ClusterIP, and compares
// whether it is delivered with netpol.Reference at the port the pod receives on.
func CheckPolicyReachability(w *PolicyWorld) error {
	c := w.Cluster
	ix := c.NetworkPolicyIndex()
	var pods []netpol.Pod
	for _, p := range ix.Pods() {
		pods = append(pods, *p)
	}
	var nss []netpol.Namespace
	for _, n := range w.Case.Namespaces {
		nss = append(nss, netpol.Namespace{Name: n.Name, Labels: n.Labels})
	}
	var errs []error
	for i := range pods {
		for j := range pods {
			if i == j {
				continue // a pod's traffic to itself does not leave it
			}
			src, dst := &pods[i], &pods[j]
			svc, ok := c.Store().GetService(dst.Namespace, "svc-"+dst.Name)
			if !ok || len(dst.IPs) == 0 {
				return fmt.Errorf("pod %s has no address or Service", dst.Key())
			}
			vip := netip.MustParseAddr(svc.Spec.ClusterIP)
			for _, cp := range PolicyPorts {
				want := netpol.Reference(w.Case.Policies, nss, pods, netpol.PodPeer(src), netpol.PodPeer(dst), uint16(cp.ContainerPort), cp.Protocol)
				for _, to := range []netip.AddrPort{
					netip.AddrPortFrom(dst.IPs[0], uint16(cp.ContainerPort)),
					netip.AddrPortFrom(vip, uint16(policyServicePort+cp.ContainerPort)),
				} {
					r, err := c.ProbeOne(netsim.Probe{From: "pod:" + src.Key(), Proto: protoNum(cp.Protocol), Dst: to, Mode: netsim.ProbePacket})
					if err != nil {
						return err
					}
					if got := r.Result == netsim.ResultDelivered; got != want {
						tr, _ := c.ProbeOne(netsim.Probe{From: "pod:" + src.Key(), Proto: protoNum(cp.Protocol), Dst: to, Mode: netsim.ProbePacket, Trace: true})
						errs = append(errs, fmt.Errorf("%s: %s -> %s (%s, pod port %d/%s): the datapath says %s, netpol.Reference says allowed=%v\n%s",
							w.Mode, src.Key(), dst.Key(), to, cp.ContainerPort, cp.Protocol, r.Outcome, want, tr.Trace))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}
