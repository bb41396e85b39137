package proxy

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Test conventions follow kube-proxy's tests: node "test-node" 192.168.0.2, pod CIDR
// 10.0.0.0/8, cluster IPs 172.30.0.0/16.
const testNodeName = "test-node"

func svc(ns, name string, f func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	f(s)
	return s
}

func slice(ns, svcName string, n int, f func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: fmt.Sprintf("%s-%d", svcName, n),
			Labels: map[string]string{discoveryv1.LabelServiceName: svcName},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	f(s)
	return s
}

func port(name string, p int32, proto corev1.Protocol) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(p), Protocol: ptr.To(proto)}
}

func addrs(list []netip.Addr) string {
	var s []string
	for _, a := range list {
		s = append(s, a.String())
	}
	return strings.Join(s, ",")
}

func epStrings(list []*Endpoint) string {
	var s []string
	for _, e := range list {
		s = append(s, e.String())
	}
	return strings.Join(s, ",")
}
