package service

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func errStrings(el field.ErrorList) []string {
	var out []string
	for _, e := range el {
		out = append(out, e.Error())
	}
	return out
}

// allocated fills what the Store would allocate, so Validate can be run on
// a builder object alone.
func allocated(svc *corev1.Service) *corev1.Service {
	if svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0 {
		svc.Spec.ClusterIP = "10.96.0.20"
		svc.Spec.ClusterIPs = []string{"10.96.0.20"}
	}
	if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for i := range svc.Spec.Ports {
			if svc.Spec.Ports[i].NodePort == 0 {
				svc.Spec.Ports[i].NodePort = 30100 + int32(i)
			}
		}
	}
	if NeedsHealthCheck(svc) && svc.Spec.HealthCheckNodePort == 0 {
		svc.Spec.HealthCheckNodePort = 30999
	}
	return svc
}

func TestValidateService(t *testing.T) {
	web := func(opts ...Option) *corev1.Service {
		return NewService("default/web", append([]Option{Selector("app=web"), Port("http", 80, 8080)}, opts...)...)
	}
	tests := []struct {
		name string
		svc  *corev1.Service
		want []string // exact messages, in order; nil = valid
	}{
		{"valid clusterIP", web(), nil},
		{"valid nodePort", web(NodePort()), nil},
		{"valid loadBalancer local", web(LoadBalancer(), ExternalTrafficPolicy("Local")), nil},
		{"valid headless without ports", NewService("default/db", Headless(), Selector("app=db")), nil},
		{"valid externalName with dot", NewService("default/ext", ExternalName("db.example.com.")), nil},
		{"valid clientIP max timeout", web(ClientIPAffinity(86400)), nil},
		{"valid dual-stack ips", web(ClusterIP("10.96.0.5", "fd00::5"), IPFamilyPolicy("RequireDualStack"), IPFamilies("IPv4", "IPv6")), nil},
		{"valid externalIPs with cluster policy", web(ExternalIPs("203.0.113.7")), nil},

		{"bad name", NewService("default/Web_1", Port("", 80, 0)),
			[]string{`metadata.name: Invalid value: "Web_1": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`}},
		{"no ports", NewService("default/web", Selector("app=web")), []string{`spec.ports: Required value`}},
		{"port zero", NewService("default/web", Port("", 0, 80)),
			[]string{`spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive`}},
		{"nodePort too big", web(NodePort(), WithNodePort("http", 99999)),
			[]string{`spec.ports[0].nodePort: Invalid value: 99999: must be between 1 and 65535, inclusive`}},
		{"port too big", NewService("default/web", Port("", 65536, 80)),
			[]string{`spec.ports[0].port: Invalid value: 65536: must be between 1 and 65535, inclusive`}},
		{"unnamed port among several", NewService("default/web", Port("http", 80, 0), Port("", 81, 0)),
			[]string{`spec.ports[1].name: Required value`}},
		{"duplicate port name", NewService("default/web", Port("http", 80, 0), Port("http", 81, 0)),
			[]string{`spec.ports[1].name: Duplicate value: "http"`}},
		{"bad port name", NewService("default/web", Port("HTTP", 80, 0)),
			[]string{`spec.ports[0].name: Invalid value: "HTTP": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`}},
		{"duplicate protocol and port", NewService("default/web", Port("a", 80, 0), Port("b", 80, 0)),
			[]string{`spec.ports[1]: Duplicate value: {"Name":"","Protocol":"TCP","AppProtocol":null,"Port":80,"TargetPort":0,"NodePort":0}`}},
		{"same port TCP and UDP is fine", NewService("default/dns", Port("dns-tcp", 53, 0), UDPPort("dns", 53, 0)), nil},
		{"bad protocol", NewService("default/web", ProtocolPort("", "ICMP", 80, 0)),
			[]string{`spec.ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"`}},
		{"targetPort out of range", NewService("default/web", Port("", 80, 70000)),
			[]string{`spec.ports[0].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive`}},
		{"targetPort name too long and odd", NewService("default/web", NamedPort("", 80, "-very-long-port-name-")),
			[]string{
				`spec.ports[0].targetPort: Invalid value: "-very-long-port-name-": must be no more than 15 characters`,
				`spec.ports[0].targetPort: Invalid value: "-very-long-port-name-": must not begin or end with a hyphen`,
			}},
		{"targetPort name digits only", NewService("default/web", ServicePort(corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("8080")})),
			[]string{`spec.ports[0].targetPort: Invalid value: "8080": must contain at least one letter (a-z)`}},
		{"targetPort name double hyphen", NewService("default/web", NamedPort("", 80, "a--b")),
			[]string{`spec.ports[0].targetPort: Invalid value: "a--b": must not contain consecutive hyphens`}},
		{"targetPort name upper case", NewService("default/web", NamedPort("", 80, "Http")),
			[]string{`spec.ports[0].targetPort: Invalid value: "Http": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)`}},
		{"nodePort on ClusterIP", NewService("default/web", ServicePort(corev1.ServicePort{Port: 80, NodePort: 30001})),
			[]string{"spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"}},
		{"duplicate nodePort same protocol", web(NodePort(), Port("metrics", 9090, 0), WithNodePort("http", 30001), WithNodePort("metrics", 30001)),
			[]string{`spec.ports[1].nodePort: Duplicate value: 30001`}},
		{"headless NodePort", web(NodePort(), Headless()),
			[]string{`spec.clusterIPs[0]: Invalid value: "None": may not be set to 'None' for NodePort services`}},
		{"headless LoadBalancer", web(LoadBalancer(), Headless()),
			[]string{`spec.clusterIPs[0]: Invalid value: "None": may not be set to 'None' for LoadBalancer services`}},
		{"externalName missing", NewService("default/ext", ExternalName("")), []string{`spec.externalName: Required value`}},
		{"externalName invalid", NewService("default/ext", ExternalName("not_a_host")),
			[]string{`spec.externalName: Invalid value: "not_a_host": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{"externalName with clusterIP", NewService("default/ext", ExternalName("a.example.com"), ClusterIP("10.96.0.9"), IPFamilies("IPv4"), IPFamilyPolicy("SingleStack")),
			[]string{
				`spec.clusterIPs: Forbidden: may not be set for ExternalName services`,
				`spec.ipFamilies: Forbidden: may not be set for ExternalName services`,
				`spec.ipFamilyPolicy: Forbidden: may not be set for ExternalName services`,
			}},
		{"session affinity unsupported", web(func(o runtime.Object) { o.(*corev1.Service).Spec.SessionAffinity = "Sticky" }),
			[]string{`spec.sessionAffinity: Unsupported value: "Sticky": supported values: "ClientIP", "None"`}},
		{"affinity timeout too big", web(ClientIPAffinity(86401)),
			[]string{`spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 86401: must be greater than 0 and less than 86400`}},
		{"affinity timeout negative", web(ClientIPAffinity(-1)),
			[]string{`spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: -1: must be greater than 0 and less than 86400`}},
		{"clusterIP not an IP", web(ClusterIP("10.96.0.300")),
			[]string{`spec.clusterIPs[0]: Invalid value: "10.96.0.300": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		{"clusterIPs mismatch", web(func(o runtime.Object) {
			s := o.(*corev1.Service)
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.5", []string{"10.96.0.6"}
		}), []string{"spec.clusterIPs: Invalid value: [\"10.96.0.6\"]: first value must match `clusterIP`"}},
		{"clusterIPs without clusterIP", web(func(o runtime.Object) { o.(*corev1.Service).Spec.ClusterIPs = []string{"10.96.0.6"} }),
			[]string{"spec.clusterIPs: Invalid value: [\"10.96.0.6\"]: must be empty when `clusterIP` is not specified"}},
		{"None not alone", web(ClusterIP("None", "fd00::1")),
			[]string{`spec.clusterIPs: Invalid value: ["None","fd00::1"]: 'None' must be the first and only value`}},
		{"two of one family", web(ClusterIP("10.96.0.5", "10.96.0.6")),
			[]string{`spec.clusterIPs: Invalid value: ["10.96.0.5","10.96.0.6"]: may specify no more than one IP for each IP family`}},
		{"three ips", web(ClusterIP("10.96.0.5", "fd00::6", "10.96.0.7")),
			[]string{
				`spec.clusterIPs: Invalid value: ["10.96.0.5","fd00::6","10.96.0.7"]: may only hold up to 2 values`,
				`spec.clusterIPs: Invalid value: ["10.96.0.5","fd00::6","10.96.0.7"]: may specify no more than one IP for each IP family`,
			}},
		{"ip family mismatch", web(ClusterIP("fd00::5"), IPFamilies("IPv4")),
			[]string{"spec.clusterIPs[0]: Invalid value: \"fd00::5\": expected an IPv4 value as indicated by `ipFamilies[0]`"}},
		{"bad family and duplicate", web(IPFamilies("IPv5", "IPv4", "IPv4")),
			[]string{
				`spec.ipFamilies[0]: Unsupported value: "IPv5": supported values: "IPv4", "IPv6"`,
				`spec.ipFamilies[2]: Duplicate value: "IPv4"`,
			}},
		{"bad family policy", web(IPFamilyPolicy("Sometimes")),
			[]string{`spec.ipFamilyPolicy: Unsupported value: "Sometimes": supported values: "PreferDualStack", "RequireDualStack", "SingleStack"`}},
		{"externalIP loopback", web(ExternalIPs("127.0.0.1")),
			[]string{`spec.externalIPs[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`}},
		{"externalIP link-local and unspecified", web(ExternalIPs("169.254.1.1", "0.0.0.0", "fe80::1", "224.0.0.5", "not-ip")),
			[]string{
				`spec.externalIPs[0]: Invalid value: "169.254.1.1": may not be in the link-local range (169.254.0.0/16, fe80::/10)`,
				`spec.externalIPs[1]: Invalid value: "0.0.0.0": may not be unspecified (0.0.0.0)`,
				`spec.externalIPs[2]: Invalid value: "fe80::1": may not be in the link-local range (169.254.0.0/16, fe80::/10)`,
				`spec.externalIPs[3]: Invalid value: "224.0.0.5": may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)`,
				`spec.externalIPs[4]: Invalid value: "not-ip": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`,
			}},
		{"non-canonical IPv6 is only a warning upstream", web(ClusterIP("FD00:0:0::0005"), IPFamilies("IPv6"), ExternalIPs("2001:DB8:0:0::7")), nil},
		{"leading zeros refused", web(ClusterIP("010.96.0.5")),
			[]string{`spec.clusterIPs[0]: Invalid value: "010.96.0.5": must not have leading 0s`}},
		{"IPv4-mapped IPv6 refused", web(ExternalIPs("::ffff:203.0.113.7")),
			[]string{`spec.externalIPs[0]: Invalid value: "::ffff:203.0.113.7": must not be an IPv4-mapped IPv6 address`}},
		{"source range with host bits", web(LoadBalancer(), LoadBalancerSourceRanges("2001:DB8::/32", "10.0.0.1/8")),
			[]string{`spec.LoadBalancerSourceRanges[1]: Invalid value: "10.0.0.1/8": must not have bits set beyond the prefix length`}},
		{"type unsupported", web(func(o runtime.Object) { o.(*corev1.Service).Spec.Type = "Internal" }),
			[]string{`spec.type: Unsupported value: "Internal": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"`}},
		{"selector bad value", web(func(o runtime.Object) { o.(*corev1.Service).Spec.Selector = map[string]string{"app": "a b"} }),
			[]string{`spec.selector: Invalid value: "a b": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`}},
		{"externalTrafficPolicy on internal service", web(ExternalTrafficPolicy("Local")),
			[]string{`spec.externalTrafficPolicy: Invalid value: "Local": may only be set for externally-accessible services`}},
		{"externalTrafficPolicy unsupported", web(NodePort(), ExternalTrafficPolicy("Nearest")),
			[]string{`spec.externalTrafficPolicy: Unsupported value: "Nearest": supported values: "Cluster", "Local"`}},
		{"internalTrafficPolicy unsupported", web(InternalTrafficPolicy("Node")),
			[]string{`spec.internalTrafficPolicy: Unsupported value: "Node": supported values: "Cluster", "Local"`}},
		{"healthCheckNodePort without LB local", web(NodePort(), HealthCheckNodePort(30555)),
			[]string{"spec.healthCheckNodePort: Invalid value: 30555: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"}},
		{"LB-only fields elsewhere", web(NodePort(), AllocateLoadBalancerNodePorts(false), LoadBalancerSourceRanges("10.0.0.0/8"),
			func(o runtime.Object) { c := "example.com/lb"; o.(*corev1.Service).Spec.LoadBalancerClass = &c }),
			[]string{
				"spec.LoadBalancerSourceRanges: Forbidden: may only be used when `type` is 'LoadBalancer'",
				"spec.allocateLoadBalancerNodePorts: Forbidden: may only be used when `type` is 'LoadBalancer'",
				"spec.loadBalancerClass: Forbidden: may only be used when `type` is 'LoadBalancer'",
			}},
		{"bad source range", web(LoadBalancer(), LoadBalancerSourceRanges(" 10.0.0.0/8 ", "10.0.0.1/33")),
			[]string{`spec.LoadBalancerSourceRanges[1]: Invalid value: "10.0.0.1/33": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)`}},
		{"trafficDistribution unsupported", web(TrafficDistribution("Anywhere")),
			[]string{`spec.trafficDistribution: Unsupported value: "Anywhere": supported values: "PreferClose", "PreferSameZone", "PreferSameNode"`}},
		{"appProtocol", web(ServicePort(corev1.ServicePort{Name: "x", Port: 81, AppProtocol: strPtr("not a name")})),
			[]string{`spec.ports[1].appProtocol: Invalid value: "not a name": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := tt.svc.DeepCopy()
			DefaultService(svc)
			allocated(svc)
			got := errStrings(ValidateService(svc))
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func strPtr(s string) *string { return &s }

func TestInvalidErrorReadsLikeA422(t *testing.T) {
	svc := NewService("default/web", Port("", 0, 0))
	DefaultService(svc)
	allocated(svc)
	err := InvalidError(svc, Validate(svc))
	want := `Service "web" is invalid: [spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive, spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive]`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if !apierrors.IsInvalid(err) {
		t.Error("not IsInvalid")
	}
	if InvalidError(svc, nil) != nil {
		t.Error("empty list gave an error")
	}
}

func TestValidateServiceUpdate(t *testing.T) {
	old := allocated(NewService("default/web", Selector("app=web"), Port("http", 80, 0), ClusterIP("10.96.0.5"),
		IPFamilies("IPv4"), IPFamilyPolicy("SingleStack")))
	DefaultService(old)
	old.ResourceVersion = "7"
	dual := old.DeepCopy()
	dual.Spec.ClusterIPs = []string{"10.96.0.5", "fd00::5"}
	dual.Spec.IPFamilies = []corev1.IPFamily{"IPv4", "IPv6"}
	pol := corev1.IPFamilyPolicyRequireDualStack
	dual.Spec.IPFamilyPolicy = &pol

	tests := []struct {
		name     string
		old, new func() *corev1.Service
		want     []string
	}{
		{"no change", old.DeepCopy, old.DeepCopy, nil},
		{"primary IP changed", old.DeepCopy, func() *corev1.Service {
			s := old.DeepCopy()
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.6", []string{"10.96.0.6"}
			return s
		}, []string{`spec.clusterIPs[0]: Invalid value: ["10.96.0.6"]: may not change once set`}},
		{"upgrade to dual-stack", old.DeepCopy, dual.DeepCopy, nil},
		{"downgrade needs SingleStack", dual.DeepCopy, func() *corev1.Service {
			s := dual.DeepCopy()
			s.Spec.ClusterIPs = s.Spec.ClusterIPs[:1]
			s.Spec.IPFamilies = s.Spec.IPFamilies[:1]
			return s
		}, []string{
			`spec.ipFamilyPolicy: Invalid value: "RequireDualStack": must be set to 'SingleStack' when releasing the secondary clusterIP`,
			`spec.ipFamilyPolicy: Invalid value: "RequireDualStack": must be set to 'SingleStack' when releasing the secondary ipFamily`,
		}},
		{"to ExternalName is exempt", old.DeepCopy, func() *corev1.Service {
			s := NewService("default/web", ExternalName("a.example.com"))
			s.ResourceVersion = "7"
			DefaultService(s)
			return s
		}, nil},
		{"name immutable", old.DeepCopy, func() *corev1.Service { s := old.DeepCopy(); s.Name = "web2"; return s },
			[]string{`metadata.name: Invalid value: "web2": field is immutable`}},
		{"healthCheckNodePort immutable", func() *corev1.Service {
			s := old.DeepCopy()
			s.Spec.Type, s.Spec.ExternalTrafficPolicy = corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal
			DefaultService(s)
			return allocated(s)
		}, func() *corev1.Service {
			s := old.DeepCopy()
			s.Spec.Type, s.Spec.ExternalTrafficPolicy = corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal
			DefaultService(s)
			s.Spec.HealthCheckNodePort = 31000
			return allocated(s)
		}, []string{`spec.healthCheckNodePort: Forbidden: field is immutable`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errStrings(ValidateUpdate(tt.new(), tt.old()))
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func TestValidateOtherKinds(t *testing.T) {
	tests := []struct {
		name string
		obj  runtime.Object
		want []string
	}{
		{"pod ok", NewPod("default/p", ContainerPort("http", 8080, "TCP"), PodIP("10.244.0.5", "fd00::5"), Hostname("p-0"), Subdomain("db")), nil},
		{"pod no containers", &corev1.Pod{ObjectMeta: NewPod("default/p").ObjectMeta},
			[]string{`spec.containers: Required value`}},
		{"pod container port problems", NewPod("default/p", ContainerPort("http", 0, "TCP"), ContainerPort("http", 70000, "ICMP"), ContainerPort("Bad-Name", 81, "UDP")),
			[]string{
				`spec.containers[0].ports[0].containerPort: Required value`,
				`spec.containers[0].ports[1].name: Duplicate value: "http"`,
				`spec.containers[0].ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive`,
				`spec.containers[0].ports[1].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"`,
				`spec.containers[0].ports[2].name: Invalid value: "Bad-Name": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)`,
			}},
		{"pod duplicate container and no image", NewPod("default/p", Container("app", "")),
			[]string{`spec.containers[1].name: Duplicate value: "app"`, `spec.containers[1].image: Required value`}},
		{"pod probe problems", func() *corev1.Pod {
			p := NewPod("default/p", ContainerPort("http", 8080, "TCP"))
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers = []corev1.Container{
				{Name: "once", Image: "i", ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(1)}}}},
				{Name: "sidecar", Image: "i", RestartPolicy: &always, ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}}},
			}
			c := &p.Spec.Containers[0]
			c.ReadinessProbe = &corev1.Probe{PeriodSeconds: -1}
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(70000)}, TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("Bad_Name")}}, SuccessThreshold: 2}
			return p
		}(),
			[]string{
				`spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always`,
				`spec.containers[0].readinessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0`,
				`spec.containers[0].readinessProbe: Required value: must specify a handler type`,
				`spec.containers[0].livenessProbe.httpGet.port: Invalid value: 70000: must be between 1 and 65535, inclusive`,
				`spec.containers[0].livenessProbe.tcpSocket.port: Invalid value: "Bad_Name": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)`,
				`spec.containers[0].livenessProbe: Forbidden: may not specify more than 1 handler type`,
				`spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1`,
			}},
		{"pod two IPv4 IPs", NewPod("default/p", PodIP("10.244.0.5", "10.244.0.6")),
			[]string{`status.podIPs: Invalid value: ["10.244.0.5","10.244.0.6"]: may specify no more than one IP for each IP family`}},
		{"pod bad hostname", NewPod("default/p", Hostname("P_0")),
			[]string{`spec.hostname: Invalid value: "P_0": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`}},
		{"namespace bad name", NewNamespace("a.b"),
			[]string{`metadata.name: Invalid value: "a.b": must not contain dots`}},
		{"node ok", NewNode("node-a", Zone("z1"), NodeIP("192.168.0.10"), PodCIDR("10.244.0.0/24", "fd00:10:244::/64")), nil},
		{"node bad cidr", NewNode("node-a", PodCIDR("10.244.0.0/33")),
			[]string{`spec.podCIDRs[0]: Invalid value: "10.244.0.0/33": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)`}},
		{"endpoints ok", NewEndpoints("default/legacy", Subset([]string{"192.168.1.1"}, []string{"192.168.1.2"}, EndpointPort("http", 80, "TCP"))), nil},
		{"endpoints problems", NewEndpoints("default/legacy",
			Subset(nil, nil, EndpointPort("", 80, "TCP")),
			Subset([]string{"127.0.0.1", "169.254.169.254"}, []string{"224.0.0.1"}, EndpointPort("a", 0, "TCP"), EndpointPort("", 81, ""))),
			[]string{
				"subsets[0]: Required value: must specify `addresses` or `notReadyAddresses`",
				`subsets[1].addresses[0].ip: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`,
				`subsets[1].addresses[1].ip: Invalid value: "169.254.169.254": may not be in the link-local range (169.254.0.0/16, fe80::/10)`,
				`subsets[1].notReadyAddresses[0].ip: Invalid value: "224.0.0.1": may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)`,
				`subsets[1].ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive`,
				`subsets[1].ports[1].name: Required value`,
			}},
		{"slice ok", NewEndpointSlice("default/ext-1", ForService("ext"), SlicePort("mysql", 3306, "TCP"), ReadyAddresses("192.168.60.4")), nil},
		{"slice problems", NewEndpointSlice("default/ext-1", AddressType("IPv4"), SlicePort("mysql", 3306, "TCP"), SlicePort("mysql", 3307, "TCP"),
			ReadyAddresses("fd00::1", "127.0.0.2"), Endpoint(discoveryv1.Endpoint{})),
			[]string{
				`endpoints[0].addresses[0]: Invalid value: "fd00::1": must be an IPv4 address`,
				`endpoints[1].addresses[0]: Invalid value: "127.0.0.2": may not be in the loopback range (127.0.0.0/8, ::1/128)`,
				`endpoints[2].addresses: Required value: must contain at least 1 address`,
				`ports[1].name: Duplicate value: "mysql"`,
			}},
		{"endpoint addresses: any IPv6 spelling, no leading zeros", NewEndpoints("default/legacy",
			Subset([]string{"FD00::0A", "192.168.001.1"}, nil, EndpointPort("http", 80, "TCP"))),
			[]string{`subsets[0].addresses[1].ip: Invalid value: "192.168.001.1": must not have leading 0s`}},
		{"slice addresses: any IPv6 spelling, not IPv4-mapped", NewEndpointSlice("default/s", AddressType("IPv6"), SlicePort("http", 80, "TCP"),
			ReadyAddresses("FD00::0A", "::ffff:192.168.1.1")),
			[]string{`endpoints[1].addresses[0]: Invalid value: "::ffff:192.168.1.1": must not be an IPv4-mapped IPv6 address`}},
		{"slice bad address type", NewEndpointSlice("default/s", AddressType("IP")),
			[]string{`addressType: Unsupported value: "IP": supported values: "FQDN", "IPv4", "IPv6"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := tt.obj.DeepCopyObject()
			Default(obj)
			got := errStrings(Validate(obj))
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func TestValidatePodUpdate(t *testing.T) {
	old := NewPod("default/p", ContainerPort("http", 8080, "TCP"))
	DefaultPod(old)
	old.ResourceVersion = "3"

	img := old.DeepCopy()
	img.Spec.Containers[0].Image = "nginx:2"
	img.Spec.NodeName = "node-a" // binding
	img.Labels = map[string]string{"app": "x"}
	if errs := ValidateUpdate(img, old); len(errs) != 0 {
		t.Errorf("image/nodeName/labels update rejected: %v", errs)
	}
	port := old.DeepCopy()
	port.Spec.Containers[0].Ports[0].ContainerPort = 9090
	errs := ValidateUpdate(port, old)
	if len(errs) != 1 || errs[0].Field != "spec" || errs[0].Type != field.ErrorTypeForbidden {
		t.Errorf("port change: got %v, want one Forbidden on spec", errs)
	}
	moved := img.DeepCopy()
	moved2 := moved.DeepCopy()
	moved2.Spec.NodeName = "node-b"
	if errs := ValidateUpdate(moved2, moved); len(errs) != 1 {
		t.Errorf("moving a bound pod: got %v, want Forbidden", errs)
	}
}

func TestDefaults(t *testing.T) {
	svc := NewService("default/web", LoadBalancer(), Port("http", 80, 0), UDPPort("dns", 53, 5353), NamedPort("x", 81, ""),
		ClientIPAffinity(0), LoadBalancerIngress("203.0.113.9"))
	DefaultService(svc)
	s := svc.Spec
	if s.Type != "LoadBalancer" || s.SessionAffinity != "ClientIP" || *s.SessionAffinityConfig.ClientIP.TimeoutSeconds != 10800 {
		t.Errorf("type/affinity: %+v", s)
	}
	if s.Ports[0].Protocol != "TCP" || s.Ports[0].TargetPort != intstr.FromInt32(80) ||
		s.Ports[1].TargetPort != intstr.FromInt32(5353) || s.Ports[2].TargetPort != intstr.FromInt32(81) {
		t.Errorf("ports: %+v", s.Ports)
	}
	if s.ExternalTrafficPolicy != "Cluster" || *s.InternalTrafficPolicy != "Cluster" || !*s.AllocateLoadBalancerNodePorts {
		t.Errorf("policies: %+v", s)
	}
	if m := svc.Status.LoadBalancer.Ingress[0].IPMode; m == nil || *m != corev1.LoadBalancerIPModeVIP {
		t.Errorf("ipMode: %v", m)
	}

	// ClusterIP without external IPs: no externalTrafficPolicy; ExternalName: no internal policy.
	c := NewService("default/c", Port("", 80, 0))
	DefaultService(c)
	if c.Spec.Type != "ClusterIP" || c.Spec.ExternalTrafficPolicy != "" || c.Spec.SessionAffinityConfig != nil {
		t.Errorf("clusterIP defaults: %+v", c.Spec)
	}
	e := NewService("default/e", ExternalName("x.example.com"))
	DefaultService(e)
	if e.Spec.InternalTrafficPolicy != nil || e.Spec.AllocateLoadBalancerNodePorts != nil {
		t.Errorf("externalName defaults: %+v", e.Spec)
	}
	// None affinity clears a stray config.
	n := NewService("default/n", Port("", 80, 0), ClientIPAffinity(60))
	n.Spec.SessionAffinity = corev1.ServiceAffinityNone
	DefaultService(n)
	if n.Spec.SessionAffinityConfig != nil {
		t.Error("affinity config kept with None")
	}

	p := NewPod("default/p", Container("side", "busybox"), ContainerPort("m", 9000, ""), HostNetwork())
	p.Status.PodIP = "10.244.0.9"
	DefaultPod(p)
	if !*p.Spec.EnableServiceLinks || p.Spec.DNSPolicy != "ClusterFirst" || p.Spec.RestartPolicy != "Always" ||
		*p.Spec.TerminationGracePeriodSeconds != 30 || p.Spec.SchedulerName != "default-scheduler" {
		t.Errorf("pod spec defaults: %+v", p.Spec)
	}
	c1 := p.Spec.Containers[1]
	if c1.ImagePullPolicy != "Always" || p.Spec.Containers[0].ImagePullPolicy != "IfNotPresent" ||
		c1.Ports[0].Protocol != "TCP" || c1.Ports[0].HostPort != 9000 || c1.TerminationMessagePath != "/dev/termination-log" {
		t.Errorf("container defaults: %+v", p.Spec.Containers)
	}
	if len(p.Status.PodIPs) != 1 || p.Status.PodIPs[0].IP != "10.244.0.9" {
		t.Errorf("podIPs not synced: %+v", p.Status)
	}

	ns := NewNamespace("shop")
	Default(ns)
	if ns.Labels[corev1.LabelMetadataName] != "shop" || ns.Status.Phase != corev1.NamespaceActive {
		t.Errorf("namespace defaults: %+v", ns)
	}
	sl := NewEndpointSlice("default/s", Endpoint(discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}}),
		func(o runtime.Object) { o.(*discoveryv1.EndpointSlice).Ports = []discoveryv1.EndpointPort{{}} })
	Default(sl)
	if *sl.Ports[0].Name != "" || *sl.Ports[0].Protocol != "TCP" {
		t.Errorf("slice port defaults: %+v", sl.Ports[0])
	}
	ep := NewEndpoints("default/e", Subset([]string{"10.0.0.1"}, nil, EndpointPort("", 80, "")))
	Default(ep)
	if ep.Subsets[0].Ports[0].Protocol != "TCP" {
		t.Errorf("endpoints port protocol: %+v", ep.Subsets[0].Ports[0])
	}

	// Idempotent.
	again := svc.DeepCopy()
	DefaultService(again)
	if !apiequality.Semantic.DeepEqual(svc, again) {
		t.Error("DefaultService is not idempotent")
	}
}

func TestBuilderWrongKindPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "service.Selector does not apply to *v1.Pod") {
			t.Errorf("recover = %v", r)
		}
	}()
	NewPod("default/p", Selector("app=x"))
}
