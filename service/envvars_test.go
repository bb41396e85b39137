package service

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func envLines(vars []corev1.EnvVar) []string {
	var out []string
	for _, v := range vars {
		out = append(out, v.Name+"="+v.Value)
	}
	return out
}

// The kubelet's envvars test, restated: per service, host, first port,
// named ports, then the link variables; IPv6 bracketed only in URLs.
func TestServiceEnvVars(t *testing.T) {
	svc := func(name, ip string, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"bar": "baz"}, ClusterIP: ip, Ports: ports}}
	}
	sp := func(name string, port int32, proto corev1.Protocol) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: port, Protocol: proto}
	}
	services := []*corev1.Service{
		svc("foo-bar", "1.2.3.4", sp("", 8080, "TCP")),
		svc("abc-123", "5.6.7.8", sp("u-d-p", 8081, "UDP"), sp("t-c-p", 8081, "TCP")),
		svc("q-u-u-x", "9.8.7.6", sp("", 8082, "TCP"), sp("8083", 8083, "TCP")),
		svc("svrc-clusterip-none", "None", sp("", 8082, "TCP")),
		svc("svrc-clusterip-empty", "", sp("", 8082, "TCP")),
		svc("super-ipv6", "2001:DB8::", sp("u-d-p", 8084, "UDP"), sp("t-c-p", 8084, "TCP")),
		svc("no-proto", "1.1.1.1", sp("", 8085, "")),
	}
	want := []string{
		"FOO_BAR_SERVICE_HOST=1.2.3.4",
		"FOO_BAR_SERVICE_PORT=8080",
		"FOO_BAR_PORT=tcp://1.2.3.4:8080",
		"FOO_BAR_PORT_8080_TCP=tcp://1.2.3.4:8080",
		"FOO_BAR_PORT_8080_TCP_PROTO=tcp",
		"FOO_BAR_PORT_8080_TCP_PORT=8080",
		"FOO_BAR_PORT_8080_TCP_ADDR=1.2.3.4",
		"ABC_123_SERVICE_HOST=5.6.7.8",
		"ABC_123_SERVICE_PORT=8081",
		"ABC_123_SERVICE_PORT_U_D_P=8081",
		"ABC_123_SERVICE_PORT_T_C_P=8081",
		"ABC_123_PORT=udp://5.6.7.8:8081",
		"ABC_123_PORT_8081_UDP=udp://5.6.7.8:8081",
		"ABC_123_PORT_8081_UDP_PROTO=udp",
		"ABC_123_PORT_8081_UDP_PORT=8081",
		"ABC_123_PORT_8081_UDP_ADDR=5.6.7.8",
		"ABC_123_PORT_8081_TCP=tcp://5.6.7.8:8081",
		"ABC_123_PORT_8081_TCP_PROTO=tcp",
		"ABC_123_PORT_8081_TCP_PORT=8081",
		"ABC_123_PORT_8081_TCP_ADDR=5.6.7.8",
		"Q_U_U_X_SERVICE_HOST=9.8.7.6",
		"Q_U_U_X_SERVICE_PORT=8082",
		"Q_U_U_X_SERVICE_PORT_8083=8083",
		"Q_U_U_X_PORT=tcp://9.8.7.6:8082",
		"Q_U_U_X_PORT_8082_TCP=tcp://9.8.7.6:8082",
		"Q_U_U_X_PORT_8082_TCP_PROTO=tcp",
		"Q_U_U_X_PORT_8082_TCP_PORT=8082",
		"Q_U_U_X_PORT_8082_TCP_ADDR=9.8.7.6",
		"Q_U_U_X_PORT_8083_TCP=tcp://9.8.7.6:8083",
		"Q_U_U_X_PORT_8083_TCP_PROTO=tcp",
		"Q_U_U_X_PORT_8083_TCP_PORT=8083",
		"Q_U_U_X_PORT_8083_TCP_ADDR=9.8.7.6",
		"SUPER_IPV6_SERVICE_HOST=2001:DB8::",
		"SUPER_IPV6_SERVICE_PORT=8084",
		"SUPER_IPV6_SERVICE_PORT_U_D_P=8084",
		"SUPER_IPV6_SERVICE_PORT_T_C_P=8084",
		"SUPER_IPV6_PORT=udp://[2001:DB8::]:8084",
		"SUPER_IPV6_PORT_8084_UDP=udp://[2001:DB8::]:8084",
		"SUPER_IPV6_PORT_8084_UDP_PROTO=udp",
		"SUPER_IPV6_PORT_8084_UDP_PORT=8084",
		"SUPER_IPV6_PORT_8084_UDP_ADDR=2001:DB8::",
		"SUPER_IPV6_PORT_8084_TCP=tcp://[2001:DB8::]:8084",
		"SUPER_IPV6_PORT_8084_TCP_PROTO=tcp",
		"SUPER_IPV6_PORT_8084_TCP_PORT=8084",
		"SUPER_IPV6_PORT_8084_TCP_ADDR=2001:DB8::",
		"NO_PROTO_SERVICE_HOST=1.1.1.1",
		"NO_PROTO_SERVICE_PORT=8085",
		"NO_PROTO_PORT=tcp://1.1.1.1:8085",
		"NO_PROTO_PORT_8085_TCP=tcp://1.1.1.1:8085",
		"NO_PROTO_PORT_8085_TCP_PROTO=tcp",
		"NO_PROTO_PORT_8085_TCP_PORT=8085",
		"NO_PROTO_PORT_8085_TCP_ADDR=1.1.1.1",
	}
	got := envLines(ServiceEnvVars(services))
	if !slices.Equal(got, want) {
		t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestEnvVarsVisibility(t *testing.T) {
	master := NewService("default/kubernetes", ClusterIP("10.96.0.1"), Port("https", 443, 6443))
	shopKube := NewService("shop/kubernetes", ClusterIP("10.96.0.99"), Port("", 8443, 0))
	web := NewService("shop/web", ClusterIP("10.96.0.20"), Port("", 80, 0))
	other := NewService("other/api", ClusterIP("10.96.0.30"), Port("", 80, 0))
	headless := NewService("shop/db", Headless(), Port("", 5432, 0))
	all := []*corev1.Service{master, web, other, headless}

	hosts := func(vars []corev1.EnvVar) []string {
		var out []string
		for _, v := range vars {
			if strings.HasSuffix(v.Name, "_SERVICE_HOST") {
				out = append(out, v.Name+"="+v.Value)
			}
		}
		return out
	}
	pod := NewPod("shop/p")
	if got := hosts(EnvVars(pod, all)); !slices.Equal(got, []string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "WEB_SERVICE_HOST=10.96.0.20"}) {
		t.Errorf("shop pod: %v", got)
	}
	noLinks := NewPod("shop/p", EnableServiceLinks(false))
	if got := hosts(EnvVars(noLinks, all)); !slices.Equal(got, []string{"KUBERNETES_SERVICE_HOST=10.96.0.1"}) {
		t.Errorf("enableServiceLinks=false: %v", got)
	}
	// A same-namespace "kubernetes" shadows the master service, in either order.
	for _, order := range [][]*corev1.Service{{master, shopKube}, {shopKube, master}} {
		if got := hosts(EnvVars(pod, order)); !slices.Equal(got, []string{"KUBERNETES_SERVICE_HOST=10.96.0.99"}) {
			t.Errorf("shadowing: %v", got)
		}
	}
}

func TestStoreServiceEnv(t *testing.T) {
	s := newStore(t, Config{MasterService: true})
	mustCreate(t, s, NewService("shop/before", ClusterIP("10.96.0.20"), Port("http", 80, 0)))
	mustCreate(t, s, NewService("default/elsewhere", ClusterIP("10.96.0.21"), Port("http", 80, 0)))
	pod := mustCreate(t, s, NewPod("shop/p")).(*corev1.Pod)
	mustCreate(t, s, NewService("shop/after", ClusterIP("10.96.0.22"), Port("http", 80, 0)))

	var names []string
	for _, v := range s.ServiceEnv(pod) {
		if strings.HasSuffix(v.Name, "_SERVICE_HOST") {
			names = append(names, v.Name+"="+v.Value)
		}
	}
	want := []string{"BEFORE_SERVICE_HOST=10.96.0.20", "KUBERNETES_SERVICE_HOST=10.96.0.1"}
	if !slices.Equal(names, want) {
		t.Errorf("got %v, want %v (services created after the pod are not seen)", names, want)
	}
	// A pod not in the store sees every current service.
	var all []string
	for _, v := range s.ServiceEnv(NewPod("shop/new")) {
		if strings.HasSuffix(v.Name, "_SERVICE_HOST") {
			all = append(all, v.Name)
		}
	}
	if !slices.Equal(all, []string{"AFTER_SERVICE_HOST", "BEFORE_SERVICE_HOST", "KUBERNETES_SERVICE_HOST"}) {
		t.Errorf("unstored pod: %v", all)
	}
}
