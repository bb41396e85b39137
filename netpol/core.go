package netpol

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodFromCore returns the policy view of a core/v1 Pod: its namespace
// ("default" when empty), name, labels, addresses (status.podIPs, else
// status.podIP; unparsable ones left out), node, hostNetwork, and the ports
// of its containers and sidecars (init containers with restartPolicy
// Always) for named ports.
func PodFromCore(p *corev1.Pod) Pod {
	out := Pod{
		Namespace: p.Namespace, Name: p.Name, Labels: cloneMap(p.Labels),
		Node: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork,
	}
	if out.Namespace == "" {
		out.Namespace = metav1.NamespaceDefault
	}
	ips := p.Status.PodIPs
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: p.Status.PodIP}}
	}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out.IPs = append(out.IPs, a.Unmap())
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out.Ports = append(out.Ports, c.Ports...)
		}
	}
	for _, c := range p.Spec.Containers {
		out.Ports = append(out.Ports, c.Ports...)
	}
	return out
}

// NamespaceFromCore returns the policy view of a core/v1 Namespace.
func NamespaceFromCore(n *corev1.Namespace) Namespace {
	return Namespace{Name: n.Name, Labels: cloneMap(n.Labels)}
}
