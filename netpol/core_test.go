package netpol

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFromCore(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			InitContainers: []corev1.Container{
				{Name: "setup", Ports: []corev1.ContainerPort{{Name: "never", ContainerPort: 1}}},
				{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: 15000}}},
			},
			Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
		},
		Status: corev1.PodStatus{PodIP: "10.244.0.5", PodIPs: []corev1.PodIP{{IP: "10.244.0.5"}, {IP: "fd00::5"}, {IP: "bogus"}}},
	}
	got := PodFromCore(p)
	want := Pod{
		Namespace: "default", Name: "web", Labels: map[string]string{"app": "web"}, Node: "node-1",
		IPs:   []netip.Addr{netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("fd00::5")},
		Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: 15000}, {Name: "http", ContainerPort: 8080}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	p.Status.PodIPs = nil
	if got := PodFromCore(p); len(got.IPs) != 1 || got.IPs[0] != netip.MustParseAddr("10.244.0.5") {
		t.Errorf("podIP only: %v", got.IPs)
	}
	p.Labels["app"] = "changed"
	if got.Labels["app"] != "web" {
		t.Error("labels not copied")
	}
	n := NamespaceFromCore(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"team": "a"}}})
	if n.Name != "x" || n.Labels["team"] != "a" {
		t.Errorf("%+v", n)
	}
}
