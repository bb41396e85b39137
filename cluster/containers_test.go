package cluster

import (
	"net/netip"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// endpointOf returns the EndpointSlice conditions of a pod's endpoint for a service, and
// false when the pod has no endpoint.
func endpointOf(t testing.TB, c *Cluster, svc, pod string) (ready, serving, terminating, ok bool) {
	t.Helper()
	for _, sl := range c.Store().EndpointSlicesFor("default", svc) {
		for _, ep := range sl.Endpoints {
			if ep.TargetRef != nil && ep.TargetRef.Name == pod {
				cd := ep.Conditions
				return cd.Ready != nil && *cd.Ready, cd.Serving != nil && *cd.Serving, cd.Terminating != nil && *cd.Terminating, true
			}
		}
	}
	return false, false, false, false
}

func podReady(c *Cluster, name string) bool {
	p, ok := c.Store().GetPod("default", name)
	return ok && service.IsPodReady(p)
}

func vipOf(t testing.TB, c *Cluster, name string, port uint16) netip.AddrPort {
	t.Helper()
	svc, ok := c.Store().GetService("default", name)
	if !ok {
		t.Fatalf("no service %s", name)
	}
	return netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), port)
}

func connect(c *Cluster, from string, dst netip.AddrPort) netsim.Outcome {
	r, _ := c.ProbeOne(netsim.Probe{From: from, Proto: netfilter.ProtoTCP, Dst: dst, Mode: netsim.ProbeConnect})
	return r.Outcome
}

// probedPod is a web pod on node-b whose container has the given probes.
func probedPod(name string, readiness, liveness, startup *corev1.Probe) *corev1.Pod {
	p := webPod(name, "node-b")
	ct := &p.Spec.Containers[0]
	ct.ReadinessProbe, ct.LivenessProbe, ct.StartupProbe = readiness, liveness, startup
	return p
}

func httpProbe(port int, period, failures, initialDelay int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(int32(port))}},
		PeriodSeconds:       period,
		FailureThreshold:    failures,
		InitialDelaySeconds: initialDelay,
	}
}

func TestSidecarPortsServed(t *testing.T) {
	c := kubeCluster(t, Config{ManualClock: true})
	always := corev1.ContainerRestartPolicyAlways
	pod := webPod("web-0", "node-b")
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "init-once", Image: "busybox", Ports: []corev1.ContainerPort{{Name: "setup", ContainerPort: 7000}}},
		{Name: "proxy-sidecar", Image: "envoy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "envoy", ContainerPort: 15001, Protocol: corev1.ProtocolTCP}}},
	}
	if err := c.Apply(service.NewService("default/mesh", service.Selector("app=MyApp"), service.NamedPort("", 80, "envoy"))); err != nil {
		t.Fatal(err)
	}
	p := mustCreatePod(t, c, pod)
	mustCreatePod(t, c, service.NewPod("default/client", service.OnNode("node-a")))
	if !p.Net().Listening(netfilter.ProtoTCP, 15001) {
		t.Fatal("the sidecar's port is not served")
	}
	if p.Net().Listening(netfilter.ProtoTCP, 7000) {
		t.Error("a run-to-completion init container's port is served")
	}
	if o := connect(c, "pod:default/client", vipOf(t, c, "mesh", 80)); o.Result != netsim.ResultConnected || o.Addr.Port() != 15001 {
		t.Errorf("the Service whose targetPort names the sidecar's port: %s, want connected at :15001", o)
	}
	obj, _ := c.Store().GetPod("default", "web-0")
	if len(obj.Status.InitContainerStatuses) != 1 || obj.Status.InitContainerStatuses[0].Name != "proxy-sidecar" || !obj.Status.InitContainerStatuses[0].Ready {
		t.Errorf("init container statuses: %+v, want the sidecar running and ready", obj.Status.InitContainerStatuses)
	}
}

// A readiness probe decides the pod's Ready condition on the virtual clock: false within
// the initial delay, true at the first success, false after failureThreshold failures in
// a row (failureThreshold × periodSeconds after the health broke), true again at the
// next success; traffic to the Service follows the EndpointSlice.
func TestReadinessProbe(t *testing.T) {
	c := kubeCluster(t, Config{ManualClock: true})
	c.Apply(myService())
	// The probe's port 8080 is not a container port: the app listens on it all the same.
	mustCreatePod(t, c, probedPod("web-0", httpProbe(8080, 5, 3, 10), nil, nil))
	mustCreatePod(t, c, service.NewPod("default/client", service.OnNode("node-a")))
	vip := vipOf(t, c, "my-service", 80)
	state := func(when string, wantReady bool) {
		t.Helper()
		ready, serving, _, ok := endpointOf(t, c, "my-service", "web-0")
		if !ok || ready != wantReady || serving != wantReady || podReady(c, "web-0") != wantReady {
			t.Errorf("%s: endpoint present %v ready %v serving %v, pod ready %v; want ready %v", when, ok, ready, serving, podReady(c, "web-0"), wantReady)
		}
		o := connect(c, "pod:default/client", vip)
		if wantReady && o.Result != netsim.ResultConnected || !wantReady && o.Result != netsim.ResultRefused {
			t.Errorf("%s: traffic to the Service: %s", when, o)
		}
	}
	state("at start, within the initial delay", false)
	c.Clock().Advance(5 * time.Second)
	state("at 5 s, within the initial delay", false)
	c.Clock().Advance(5 * time.Second)
	state("at 10 s, the first probe passed", true)
	if err := c.SetPodHealth("default", "web-0", PodHealth{HTTPStatus: 500}); err != nil {
		t.Fatal(err)
	}
	c.Clock().Advance(10 * time.Second)
	state("two failures (15 s, 20 s)", true)
	c.Clock().Advance(5 * time.Second)
	state("the third failure (25 s)", false)
	c.SetPodHealth("default", "web-0", PodHealth{})
	c.Clock().Advance(4 * time.Second)
	state("healthy again, before the next probe", false)
	c.Clock().Advance(time.Second)
	state("the next probe passed (30 s)", true)
	if cs, _ := c.PodContainers("default", "web-0"); cs[0].RestartCount != 0 {
		t.Errorf("readiness failures restarted the container: %+v", cs)
	}
}

// The probe is a TCP handshake from the node's host network over the simulated network:
// a rule dropping the kubelet's packets to the pod fails it as a NetworkPolicy would.
func TestReadinessProbeCrossesTheNetwork(t *testing.T) {
	c := kubeCluster(t, Config{ManualClock: true})
	c.Apply(myService())
	p := mustCreatePod(t, c, probedPod("web-0", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}}, nil, nil))
	if !podReady(c, "web-0") {
		t.Fatal("the first probe, run when the container started, did not pass")
	}
	nodeIP := c.Node("node-b").IP()
	c.Node("node-b").AddHandler(netsim.HandlerSpec{Name: "deny-kubelet", Hook: netfilter.Output, Priority: 0, Handler: netsim.HandlerFunc(func(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
		if pk.Src == nodeIP && pk.Dst == p.IP() && pk.DstPort == 9376 {
			return netsim.VerdictDrop
		}
		return netsim.VerdictContinue
	})})
	c.Clock().Advance(20 * time.Second)
	if !podReady(c, "web-0") {
		t.Error("unready after two failed probes; the default failureThreshold is 3")
	}
	c.Clock().Advance(10 * time.Second)
	if podReady(c, "web-0") {
		t.Error("still ready after three probes dropped on the way")
	}
	if ready, serving, _, _ := endpointOf(t, c, "my-service", "web-0"); ready || serving {
		t.Errorf("endpoint ready %v serving %v, want neither", ready, serving)
	}
}

// A liveness probe's failures restart the container: restartCount goes up, the app's
// servers come back, and the pod is not ready until its readiness probe passes again.
func TestLivenessProbeRestartsTheContainer(t *testing.T) {
	c := kubeCluster(t, Config{ManualClock: true})
	c.Apply(myService())
	live := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9376)}}, PeriodSeconds: 10, FailureThreshold: 3}
	p := mustCreatePod(t, c, probedPod("web-0", httpProbe(9376, 10, 1, 0), live, nil))
	if !podReady(c, "web-0") {
		t.Fatal("not ready after the first probe")
	}
	if err := c.SetPodHealth("default", "web-0", PodHealth{NotListening: true}); err != nil {
		t.Fatal(err)
	}
	if p.Net().Listening(netfilter.ProtoTCP, 9376) {
		t.Fatal("the app still listens")
	}
	c.Clock().Advance(10 * time.Second)
	if podReady(c, "web-0") {
		t.Error("ready after a failed readiness probe with failureThreshold 1")
	}
	c.Clock().Advance(10 * time.Second)
	if cs, _ := c.PodContainers("default", "web-0"); cs[0].RestartCount != 0 {
		t.Errorf("restarted after two liveness failures: %+v", cs)
	}
	c.Clock().Advance(10 * time.Second)
	cs, _ := c.PodContainers("default", "web-0")
	if cs[0].RestartCount != 1 || !cs[0].Running || cs[0].Ready {
		t.Errorf("after three liveness failures: %+v, want restarted once, running, not ready", cs)
	}
	if !p.Net().Listening(netfilter.ProtoTCP, 9376) {
		t.Error("the restarted container does not listen")
	}
	obj, _ := c.Store().GetPod("default", "web-0")
	if service.IsPodReady(obj) || obj.Status.ContainerStatuses[0].RestartCount != 1 {
		t.Errorf("pod status after the restart: ready %v, container statuses %+v", service.IsPodReady(obj), obj.Status.ContainerStatuses)
	}
	c.Clock().Advance(10 * time.Second)
	if !podReady(c, "web-0") {
		t.Error("not ready after the restarted container's readiness probe passed")
	}
	// A second round of failures waits for the restart back-off (10 s) with the server down.
	c.SetPodHealth("default", "web-0", PodHealth{NotListening: true})
	c.Clock().Advance(30 * time.Second)
	cs, _ = c.PodContainers("default", "web-0")
	if cs[0].RestartCount != 2 || cs[0].Running || p.Net().Listening(netfilter.ProtoTCP, 9376) {
		t.Errorf("in the back-off after the second restart: %+v, listening %v", cs, p.Net().Listening(netfilter.ProtoTCP, 9376))
	}
	c.Clock().Advance(10 * time.Second)
	if cs, _ = c.PodContainers("default", "web-0"); !cs[0].Running || !p.Net().Listening(netfilter.ProtoTCP, 9376) {
		t.Errorf("after the back-off: %+v", cs)
	}
}

// A startup probe holds readiness and liveness until it passes; exec probes cannot run
// and succeed.
func TestStartupAndExecProbes(t *testing.T) {
	c := kubeCluster(t, Config{ManualClock: true})
	c.Apply(myService())
	exec := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/healthy"}}}}
	startup := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(9376)}}, InitialDelaySeconds: 20}
	mustCreatePod(t, c, probedPod("web-0", exec, nil, startup))
	mustCreatePod(t, c, probedPod("web-1", exec, exec, nil))
	if !podReady(c, "web-1") {
		t.Error("an exec readiness probe did not succeed")
	}
	if podReady(c, "web-0") {
		t.Error("ready before its startup probe passed")
	}
	c.Clock().Advance(10 * time.Second)
	if podReady(c, "web-0") {
		t.Error("ready at 10 s, within its startup probe's initial delay")
	}
	if cs, _ := c.PodContainers("default", "web-0"); cs[0].Started {
		t.Errorf("started before its startup probe passed: %+v", cs)
	}
	c.Clock().Advance(10 * time.Second)
	if !podReady(c, "web-0") {
		t.Error("not ready after its startup and readiness probes passed (20 s)")
	}
	c.Clock().Advance(30 * time.Second)
	if cs, _ := c.PodContainers("default", "web-1"); !podReady(c, "web-1") || cs[0].RestartCount != 0 {
		t.Errorf("exec liveness and readiness probes: ready %v, %+v", podReady(c, "web-1"), cs)
	}
}

// A pod that turns Failed or Succeeded loses its endpoint (the EndpointSlice controller
// leaves out pods in a terminal phase) and its network; its object stays.
func TestTerminalPhaseDropsTheEndpoint(t *testing.T) {
	c := kubeCluster(t, Config{ManualClock: true})
	c.Apply(myService())
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	mustCreatePod(t, c, webPod("web-1", "node-c"))
	for _, ph := range []corev1.PodPhase{corev1.PodFailed, corev1.PodSucceeded} {
		name := map[corev1.PodPhase]string{corev1.PodFailed: "web-0", corev1.PodSucceeded: "web-1"}[ph]
		if _, _, _, ok := endpointOf(t, c, "my-service", name); !ok {
			t.Fatalf("%s has no endpoint to begin with", name)
		}
		if err := c.SetPodPhase("default", name, ph); err != nil {
			t.Fatal(err)
		}
		if _, _, _, ok := endpointOf(t, c, "my-service", name); ok {
			t.Errorf("%s: the endpoint of a %s pod stays", name, ph)
		}
		if c.Pod("default", name) != nil {
			t.Errorf("%s: a %s pod's network still runs", name, ph)
		}
		obj, ok := c.Store().GetPod("default", name)
		if !ok || obj.Status.Phase != ph {
			t.Errorf("%s: the pod object is gone or not %s", name, ph)
		}
	}
	if err := c.SetPodPhase("default", "web-0", corev1.PodRunning); err == nil {
		t.Error("SetPodPhase accepted Running")
	}
}

// EvictPod deletes gracefully with the pod's terminationGracePeriodSeconds: the endpoint
// is terminating (serving while ready) until the grace period passes.
func TestEvictPodUsesTheGracePeriod(t *testing.T) {
	c := kubeCluster(t, Config{ManualClock: true})
	c.Apply(myService())
	pod := webPod("web-0", "node-b")
	grace := int64(20)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	mustCreatePod(t, c, pod)
	if err := c.EvictPod("default", "web-0"); err != nil {
		t.Fatal(err)
	}
	if ready, serving, term, ok := endpointOf(t, c, "my-service", "web-0"); !ok || ready || !serving || !term {
		t.Errorf("evicted pod's endpoint: present %v ready %v serving %v terminating %v; want terminating and serving", ok, ready, serving, term)
	}
	c.Clock().Advance(19 * time.Second)
	if c.Pod("default", "web-0") == nil {
		t.Error("the evicted pod died before its 20 s grace period")
	}
	c.Clock().Advance(time.Second)
	if _, ok := c.Store().GetPod("default", "web-0"); ok {
		t.Error("the evicted pod is still there after its grace period")
	}
	if err := c.EvictPod("default", "nope"); err == nil {
		t.Error("evicting a missing pod succeeded")
	}
}

// A hostNetwork pod's probe goes to the node's own address; a pod whose servers the
// kubelet does not run (clusterlab.io/serve: "false") fails a tcpSocket probe.
func TestProbeHostNetworkAndNoServer(t *testing.T) {
	c := kubeCluster(t, Config{ManualClock: true})
	tcp := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9376)}}}
	host := probedPod("host-0", tcp, nil, nil)
	host.Spec.HostNetwork = true
	mustCreatePod(t, c, host)
	if !podReady(c, "host-0") {
		t.Error("a hostNetwork pod serving its probe port is not ready")
	}
	quiet := probedPod("quiet-0", tcp, nil, nil)
	quiet.Annotations = map[string]string{AnnotationServe: "false"}
	mustCreatePod(t, c, quiet)
	c.Clock().Advance(30 * time.Second)
	if podReady(c, "quiet-0") {
		t.Error("a pod that listens nowhere passed its tcpSocket probe")
	}
}

// A restart mends the pod's health: the servers the broken health closed in its other
// containers (a sidecar) listen again.
func TestRestartReopensTheOtherContainers(t *testing.T) {
	c := kubeCluster(t, Config{ManualClock: true})
	always := corev1.ContainerRestartPolicyAlways
	live := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9376)}}, FailureThreshold: 1}
	pod := probedPod("web-0", nil, live, nil)
	pod.Spec.InitContainers = []corev1.Container{{Name: "sidecar", Image: "envoy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{ContainerPort: 15001, Protocol: corev1.ProtocolTCP}}}}
	p := mustCreatePod(t, c, pod)
	c.SetPodHealth("default", "web-0", PodHealth{NotListening: true})
	if p.Net().Listening(netfilter.ProtoTCP, 15001) || p.Net().Listening(netfilter.ProtoTCP, 9376) {
		t.Fatal("listening: false left a server open")
	}
	c.Clock().Advance(10 * time.Second)
	cs, _ := c.PodContainers("default", "web-0")
	if len(cs) != 2 || !cs[0].Sidecar || cs[0].RestartCount != 0 || cs[1].RestartCount != 1 {
		t.Fatalf("containers after the liveness failure: %+v", cs)
	}
	if !p.Net().Listening(netfilter.ProtoTCP, 15001) || !p.Net().Listening(netfilter.ProtoTCP, 9376) {
		t.Error("after the restart the pod's servers do not all listen")
	}
}
