package service

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The kubelet gives every container environment variables describing the
// services it can see (kubernetes pkg/kubelet/envvars and kubelet_pods.go).
// For a service "my-svc" with clusterIP 10.96.0.11 and ports http 80/TCP and
// dns 53/UDP:
//
//	MY_SVC_SERVICE_HOST=10.96.0.11
//	MY_SVC_SERVICE_PORT=80
//	MY_SVC_SERVICE_PORT_HTTP=80
//	MY_SVC_SERVICE_PORT_DNS=53
//	MY_SVC_PORT=tcp://10.96.0.11:80
//	MY_SVC_PORT_80_TCP=tcp://10.96.0.11:80
//	MY_SVC_PORT_80_TCP_PROTO=tcp
//	MY_SVC_PORT_80_TCP_PORT=80
//	MY_SVC_PORT_80_TCP_ADDR=10.96.0.11
//	MY_SVC_PORT_53_UDP=udp://10.96.0.11:53
//	...

// MasterServiceNamespace and MasterServiceName name the service whose
// variables every pod gets, even with enableServiceLinks false.
const (
	MasterServiceNamespace = metav1.NamespaceDefault
	MasterServiceName      = "kubernetes"
)

// EnvVars returns the service variables the kubelet gives pod's containers,
// from the services it is given (the kubelet passes every service it knows;
// the Store passes those that existed when the pod was created): services
// with a cluster IP in the pod's namespace when spec.enableServiceLinks is
// not false, plus default/kubernetes always (a same-namespace service named
// "kubernetes" shadows it). The kubelet's own order is a map's; here
// services are sorted by name, and each service's variables come in the
// kubelet's order: _SERVICE_HOST, _SERVICE_PORT, _SERVICE_PORT_<NAME>, then
// the Docker link variables.
func EnvVars(pod *corev1.Pod, services []*corev1.Service) []corev1.EnvVar {
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	byName := map[string]*corev1.Service{}
	for _, svc := range services {
		if !HasClusterIP(svc) {
			continue
		}
		if svc.Namespace == MasterServiceNamespace && svc.Name == MasterServiceName {
			if _, ok := byName[svc.Name]; !ok {
				byName[svc.Name] = svc
			}
		} else if svc.Namespace == pod.Namespace && links {
			byName[svc.Name] = svc
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	selected := make([]*corev1.Service, len(names))
	for i, n := range names {
		selected[i] = byName[n]
	}
	return ServiceEnvVars(selected)
}

// ServiceEnvVars returns the variables for each given service with a
// cluster IP, in the given order (the kubelet's envvars.FromServices).
func ServiceEnvVars(services []*corev1.Service) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, svc := range services {
		if !HasClusterIP(svc) || len(svc.Spec.Ports) == 0 {
			continue
		}
		prefix := envName(svc.Name)
		out = append(out,
			corev1.EnvVar{Name: prefix + "_SERVICE_HOST", Value: svc.Spec.ClusterIP},
			corev1.EnvVar{Name: prefix + "_SERVICE_PORT", Value: strconv.Itoa(int(svc.Spec.Ports[0].Port))})
		for _, sp := range svc.Spec.Ports {
			if sp.Name != "" {
				out = append(out, corev1.EnvVar{Name: prefix + "_SERVICE_PORT_" + envName(sp.Name), Value: strconv.Itoa(int(sp.Port))})
			}
		}
		out = append(out, linkVars(svc, prefix)...)
	}
	return out
}

func envName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

// linkVars are the Docker-link style variables.
func linkVars(svc *corev1.Service, prefix string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for i, sp := range svc.Spec.Ports {
		proto := string(corev1.ProtocolTCP)
		if sp.Protocol != "" {
			proto = string(sp.Protocol)
		}
		hostPort := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(sp.Port)))
		url := fmt.Sprintf("%s://%s", strings.ToLower(proto), hostPort)
		if i == 0 {
			out = append(out, corev1.EnvVar{Name: prefix + "_PORT", Value: url})
		}
		pp := fmt.Sprintf("%s_PORT_%d_%s", prefix, sp.Port, strings.ToUpper(proto))
		out = append(out,
			corev1.EnvVar{Name: pp, Value: url},
			corev1.EnvVar{Name: pp + "_PROTO", Value: strings.ToLower(proto)},
			corev1.EnvVar{Name: pp + "_PORT", Value: strconv.Itoa(int(sp.Port))},
			corev1.EnvVar{Name: pp + "_ADDR", Value: svc.Spec.ClusterIP})
	}
	return out
}

// ServiceEnv returns the service variables of a stored pod, as the kubelet
// computes them when the pod's containers start: from the services (as they
// are now) that were created before the pod, in its namespace (when
// enableServiceLinks) plus default/kubernetes. For a pod not in the store
// every current service counts.
func (s *Store) ServiceEnv(pod *corev1.Pod) []corev1.EnvVar {
	s.mu.Lock()
	defer s.mu.Unlock()
	podSeq, stored := s.created[createdKey(KindPod, pod.Namespace, pod.Name)]
	var svcs []*corev1.Service
	for _, ns := range []string{pod.Namespace, MasterServiceNamespace} {
		for _, o := range s.objs[KindService][ns] {
			svc := o.(*corev1.Service)
			if stored && s.created[createdKey(KindService, svc.Namespace, svc.Name)] > podSeq {
				continue
			}
			svcs = append(svcs, svc)
		}
		if ns == MasterServiceNamespace {
			break
		}
	}
	return EnvVars(pod, svcs)
}
