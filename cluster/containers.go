package cluster

// The simulated kubelet's containers: what runs in a started pod, container by container,
// and the probes it runs against them.
//
//	pod starts ─▶ sidecars (init containers with restartPolicy Always), in order
//	          ─▶ regular containers
//	each: the built-in whoami server on its TCP and UDP ports, and its probes:
//
//	kubelet (node host network) ── TCP handshake over the network ──▶ pod IP:port
//	   every periodSeconds on the virtual clock, from the container's start
//	   (skipped within initialDelaySeconds; timeoutSeconds bounds the answer)
//	      │ success/failure in a row reach successThreshold / failureThreshold
//	      ▼
//	startup:   until it passes, readiness and liveness are not run; failing: restart
//	readiness: the container's Ready (false until the first success) → the pod's Ready
//	           and ContainersReady conditions → the EndpointSlice's ready/serving
//	liveness:  failing: the container restarts (its servers stop, restartCount+1,
//	           not ready until readiness passes again)
//
// The probes follow pkg/kubelet/prober (worker.go): the first probe runs when the
// container starts, then every period; a result changes the container's state only after
// successThreshold successes or failureThreshold failures in a row; readiness starts
// false, liveness and startup unknown. A probe is a TCP handshake from the node's host
// network to the pod's IP (ProbeConnect): NetworkPolicy, handlers, faults and a dead pod
// network fail it as they would a real kubelet's. An httpGet or grpc probe that connects
// gets the answer of the pod's health endpoint: 200 (gRPC SERVING), or the status that
// SetPodHealth set; a pod running an app (clusterlab.io/app) answers 200. exec probes
// cannot run in the simulation: they always succeed (so manifests from real clusters
// load and their pods get ready).
//
// Not modelled: a sidecar's startup probe holding back the containers after it (all
// containers start together), probe-level terminationGracePeriodSeconds, the
// readiness probe the kubelet runs at once when a startup probe passes (it waits for
// its next period), and httpGet's host, scheme and headers (the pod IP is asked).

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"gvisor.dev/gvisor/pkg/tcpip"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The API defaults of a probe's fields (k8s.io/kubernetes pkg/apis/core/v1/defaults.go).
const (
	defaultProbeTimeout          = 1 * time.Second
	defaultProbePeriod           = 10 * time.Second
	defaultProbeSuccessThreshold = 1
	defaultProbeFailureThreshold = 3
)

// The kubelet's container restart back-off: the first restart is at once, then 10 s,
// doubling up to 5 minutes (pkg/kubelet/kubelet.go backOffPeriod, MaxContainerBackOff).
const (
	restartBackOffInitial = 10 * time.Second
	restartBackOffMax     = 300 * time.Second
)

// PodHealth is the health of a pod's app, as its probes see it: set with SetPodHealth to
// make probes fail on purpose.
type PodHealth struct {
	// HTTPStatus is what the pod's health endpoints answer httpGet (and grpc) probes: 0
	// or 200 healthy; 500 (any status outside 200-399) fails them.
	HTTPStatus int
	// NotListening closes the pod's servers (every container's ports): connections and
	// tcpSocket probes are refused. A container restart opens them again.
	NotListening bool
}

func (h PodHealth) status() int {
	if h.HTTPStatus == 0 {
		return 200
	}
	return h.HTTPStatus
}

type probeKind int

const (
	probeStartup probeKind = iota
	probeReadiness
	probeLiveness
)

func (k probeKind) String() string {
	return [...]string{"startup", "readiness", "liveness"}[k]
}

type probeResult int

const (
	resultUnknown probeResult = iota
	resultSuccess
	resultFailure
)

// podRun is the kubelet's state of a running pod.
type podRun struct {
	c    *Cluster
	node *Node
	p    *netsim.Pod
	ns   string
	name string
	uid  types.UID

	mu         sync.Mutex
	stopped    bool
	serve      bool // the built-in server runs on the containers' ports
	app        bool // a registered app runs instead
	annotReady bool // clusterlab.io/ready is not "false"
	health     PodHealth
	containers []*containerRun
	lastReady  *bool // the Ready condition the kubelet last wrote
}

// containerRun is one container of a running pod.
type containerRun struct {
	pr      *podRun
	name    string
	sidecar bool
	ports   []corev1.ContainerPort
	// probePorts are probes' TCP ports that are none of the container's: served too,
	// unless another container of the pod has them.
	probePorts []uint16
	stops      []func()
	running    bool
	startedAt  time.Time
	restarts   int32
	ready      bool // the readiness probe's result (true without one)
	started    bool // the startup probe's result (true without one)
	message    string
	gen        int // bumped at each (re)start: a pending restart of an older one is void
	probes     [3]*probeWorker
}

// probeWorker runs one probe of one container on the virtual clock.
type probeWorker struct {
	ct    *containerRun
	kind  probeKind
	spec  corev1.Probe // defaults filled in
	timer tcpip.Timer
	last  probeResult
	run   int // how many times in a row last came
	hold  bool
}

func (c *Cluster) podRunFor(ns, name string) *podRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[ns+"/"+name]
}

// newPodRun records a started pod's containers: sidecars first, then the regular ones.
func (c *Cluster) newPodRun(n *Node, p *netsim.Pod, pod *corev1.Pod) *podRun {
	pr := &podRun{c: c, node: n, p: p, ns: pod.Namespace, name: pod.Name, uid: pod.UID, annotReady: pod.Annotations[AnnotationReady] != "false"}
	for i := range pod.Spec.InitContainers {
		ct := &pod.Spec.InitContainers[i]
		if ct.RestartPolicy != nil && *ct.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			pr.containers = append(pr.containers, pr.newContainer(ct, true))
		}
	}
	for i := range pod.Spec.Containers {
		pr.containers = append(pr.containers, pr.newContainer(&pod.Spec.Containers[i], false))
	}
	declared := map[uint16]bool{}
	for _, ct := range pr.containers {
		for _, cp := range ct.ports {
			if cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP {
				declared[uint16(cp.ContainerPort)] = true
			}
		}
	}
	for _, ct := range pr.containers {
		var keep []uint16
		for _, port := range ct.probePorts {
			if !declared[port] {
				keep = append(keep, port)
			}
		}
		ct.probePorts = keep
	}
	key := pod.Namespace + "/" + pod.Name
	c.mu.Lock()
	c.runs[key] = pr
	c.mu.Unlock()
	p.OnKill(func() { pr.stop() })
	return pr
}

func (pr *podRun) newContainer(ct *corev1.Container, sidecar bool) *containerRun {
	cr := &containerRun{pr: pr, name: ct.Name, sidecar: sidecar, ports: ct.Ports, ready: true, started: true}
	for kind, spec := range [3]*corev1.Probe{ct.StartupProbe, ct.ReadinessProbe, ct.LivenessProbe} {
		if spec == nil {
			continue
		}
		cr.addProbePort(spec)
		w := &probeWorker{ct: cr, kind: probeKind(kind), spec: probeDefaults(spec)}
		cr.probes[kind] = w
		switch w.kind {
		case probeReadiness:
			cr.ready = false
		case probeStartup:
			cr.started = false
		}
	}
	return cr
}

// addProbePort makes the container's server listen on a probe's numbered TCP port too
// when it is not one of the container's ports (an app's health port is often left
// undeclared), so that a healthy pod passes its probes.
func (cr *containerRun) addProbePort(spec *corev1.Probe) {
	port, ok := probeHandlerPort(spec)
	if !ok {
		return
	}
	if port.Type != intstr.Int || port.IntVal <= 0 || port.IntVal > 65535 {
		return
	}
	cr.probePorts = append(cr.probePorts, uint16(port.IntVal))
}

// probeDefaults fills in the API defaults of a probe's unset (zero) fields.
func probeDefaults(p *corev1.Probe) corev1.Probe {
	s := *p.DeepCopy()
	if s.TimeoutSeconds <= 0 {
		s.TimeoutSeconds = int32(defaultProbeTimeout / time.Second)
	}
	if s.PeriodSeconds <= 0 {
		s.PeriodSeconds = int32(defaultProbePeriod / time.Second)
	}
	if s.SuccessThreshold <= 0 {
		s.SuccessThreshold = defaultProbeSuccessThreshold
	}
	if s.FailureThreshold <= 0 {
		s.FailureThreshold = defaultProbeFailureThreshold
	}
	if s.InitialDelaySeconds < 0 {
		s.InitialDelaySeconds = 0
	}
	return s
}

// stop ends the pod's probes (the pod died).
func (pr *podRun) stop() {
	pr.mu.Lock()
	pr.stopped = true
	var timers []tcpip.Timer
	for _, ct := range pr.containers {
		for _, w := range ct.probes {
			if w != nil && w.timer != nil {
				timers = append(timers, w.timer)
			}
		}
	}
	pr.mu.Unlock()
	for _, t := range timers {
		t.Stop()
	}
	pr.c.mu.Lock()
	if pr.c.runs[pr.ns+"/"+pr.name] == pr {
		delete(pr.c.runs, pr.ns+"/"+pr.name)
	}
	pr.c.mu.Unlock()
}

// startContainers starts every container (sidecars first, as the kubelet starts them
// before the regular containers) and their probe workers, running each worker's first
// probe at once.
func (pr *podRun) startContainers() {
	now := pr.c.Clock().Now()
	for _, ct := range pr.containers {
		pr.startContainer(ct, now)
	}
	for _, ct := range pr.containers {
		for _, w := range ct.probes {
			if w != nil {
				w.tick(now)
			}
		}
	}
}

// startContainer starts the container: it runs from now, with its servers.
func (pr *podRun) startContainer(ct *containerRun, at time.Time) {
	pr.mu.Lock()
	ct.running = true
	ct.gen++
	ct.startedAt = at
	pr.mu.Unlock()
	pr.serveContainer(ct)
}

// serveContainer runs the built-in server on the container's ports (unless the pod runs
// an app or no server, or its health says it does not listen).
func (pr *podRun) serveContainer(ct *containerRun) {
	pr.mu.Lock()
	serve := pr.serve && !pr.health.NotListening
	pr.mu.Unlock()
	if !serve {
		return
	}
	for _, cp := range ct.ports {
		proto := netfilter.ProtoTCP
		switch cp.Protocol {
		case corev1.ProtocolUDP:
			proto = netfilter.ProtoUDP
		case corev1.ProtocolSCTP:
			continue // netstack has no SCTP sockets
		}
		stop, err := pr.p.ServeStoppable(proto, uint16(cp.ContainerPort))
		if err != nil {
			pr.c.recordErr(fmt.Errorf("kubelet %s: container %s: %w", pr.node.Name(), ct.name, err))
			continue
		}
		pr.mu.Lock()
		ct.stops = append(ct.stops, stop)
		pr.mu.Unlock()
	}
	for _, port := range ct.probePorts {
		stop, err := pr.p.ServeStoppable(netfilter.ProtoTCP, port)
		if err != nil {
			continue // another container of the pod serves it
		}
		pr.mu.Lock()
		ct.stops = append(ct.stops, stop)
		pr.mu.Unlock()
	}
}

// stopServers closes the container's ports.
func (pr *podRun) stopServers(ct *containerRun) {
	pr.mu.Lock()
	stops := ct.stops
	ct.stops = nil
	pr.mu.Unlock()
	for _, s := range stops {
		s()
	}
}

// podReadyLocked is the pod's readiness: every container running and ready, and
// clusterlab.io/ready not "false".
func (pr *podRun) podReadyLocked() bool {
	if !pr.annotReady {
		return false
	}
	for _, ct := range pr.containers {
		if !ct.running || !ct.ready || !ct.started {
			return false
		}
	}
	return true
}

// readyNow reports the pod's readiness, and records it as written.
func (pr *podRun) readyNow() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	r := pr.podReadyLocked()
	pr.lastReady = &r
	return r
}

// containerStatusesLocked renders the containers' statuses (sidecars among the init
// containers' statuses).
func (pr *podRun) containerStatusesLocked() (init, regular []corev1.ContainerStatus) {
	for _, ct := range pr.containers {
		started := ct.running && ct.started
		st := corev1.ContainerStatus{Name: ct.name, Ready: ct.running && ct.ready && ct.started, RestartCount: ct.restarts, Started: &started}
		if ct.running {
			st.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(ct.startedAt)}
		} else {
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: ct.message}
		}
		if ct.sidecar {
			init = append(init, st)
		} else {
			regular = append(regular, st)
		}
	}
	return init, regular
}

// writeStatus writes the pod's Ready condition and container statuses to the API when
// its readiness or a container changed (force), as the kubelet's status manager does.
func (pr *podRun) writeStatus(force bool) {
	pr.mu.Lock()
	if pr.stopped {
		pr.mu.Unlock()
		return
	}
	ready := pr.podReadyLocked()
	changed := pr.lastReady == nil || *pr.lastReady != ready
	if !changed && !force {
		pr.mu.Unlock()
		return
	}
	pr.lastReady = &ready
	initSt, regSt := pr.containerStatusesLocked()
	pr.mu.Unlock()
	cur, ok := pr.c.store.GetPod(pr.ns, pr.name)
	if !ok || cur.UID != pr.uid || cur.Status.Phase != corev1.PodRunning {
		return
	}
	st := cur.DeepCopy()
	setCondition(st, corev1.ContainersReady, ready)
	setCondition(st, corev1.PodReady, ready)
	st.Status.InitContainerStatuses, st.Status.ContainerStatuses = initSt, regSt
	if _, err := pr.c.store.UpdateStatus(st); err != nil {
		pr.c.recordErr(fmt.Errorf("kubelet %s: pod %s/%s status: %w", pr.node.Name(), pr.ns, pr.name, err))
	}
}

// setHealth changes the pod's health: listening again or not opens or closes the
// containers' servers.
func (pr *podRun) setHealth(h PodHealth) {
	pr.mu.Lock()
	old := pr.health
	pr.health = h
	pr.mu.Unlock()
	if h.NotListening && !old.NotListening {
		for _, ct := range pr.containers {
			pr.stopServers(ct)
		}
	}
	if !h.NotListening && old.NotListening {
		for _, ct := range pr.containers {
			pr.mu.Lock()
			running := ct.running
			pr.mu.Unlock()
			if running {
				pr.serveContainer(ct)
			}
		}
	}
}

// restart kills a container whose liveness or startup probe failed and starts it again
// after the restart back-off: its servers are down meanwhile, its probes start afresh
// (readiness false until it passes again), the app's health is mended and
// restartCount goes up.
func (pr *podRun) restart(ct *containerRun, at time.Time, why string) {
	pr.stopServers(ct)
	pr.mu.Lock()
	if pr.stopped {
		pr.mu.Unlock()
		return
	}
	delay := time.Duration(0)
	if ct.restarts > 0 {
		delay = restartBackOffInitial << (ct.restarts - 1)
		if delay > restartBackOffMax || delay <= 0 {
			delay = restartBackOffMax
		}
	}
	ct.running = false
	ct.restarts++
	ct.message = why
	ct.gen++
	gen := ct.gen
	wasClosed := pr.health.NotListening
	pr.health = PodHealth{}
	var others []*containerRun // running containers whose servers the broken health closed
	for _, o := range pr.containers {
		if wasClosed && o != ct && o.running {
			others = append(others, o)
		}
	}
	for _, w := range ct.probes {
		if w == nil {
			continue
		}
		w.last, w.run, w.hold = resultUnknown, 0, false
		switch w.kind {
		case probeReadiness:
			ct.ready = false
		case probeStartup:
			ct.started = false
		}
	}
	pr.mu.Unlock()
	for _, o := range others {
		pr.serveContainer(o)
	}
	pr.writeStatus(true)
	startAt := at.Add(delay)
	start := func() {
		pr.mu.Lock()
		void := pr.stopped || ct.gen != gen
		pr.mu.Unlock()
		if void || pr.c.isClosed() {
			return
		}
		pr.startContainer(ct, startAt)
		pr.writeStatus(true)
	}
	if delay == 0 {
		start()
		return
	}
	pr.c.Clock().AfterFunc(max(0, startAt.Sub(pr.c.Clock().Now())), start)
}

// tick runs the probe due at due once and arms the next one a period later. Timers run
// by Clock.Advance see the clock at the end of the advance, so the schedule counts from
// due times, not from the clock's reading.
func (w *probeWorker) tick(due time.Time) {
	pr := w.ct.pr
	pr.mu.Lock()
	if pr.stopped {
		pr.mu.Unlock()
		return
	}
	next := due.Add(time.Duration(w.spec.PeriodSeconds) * time.Second)
	w.timer = pr.c.Clock().AfterFunc(max(0, next.Sub(pr.c.Clock().Now())), func() { w.tick(next) })
	pr.mu.Unlock()
	if pr.c.isClosed() {
		return
	}
	w.probe(due)
}

// probe is pkg/kubelet/prober worker.doProbe: it skips a container that is not running,
// within its initial delay, or (readiness, liveness) not started yet; then it runs the
// probe and applies the thresholds.
func (w *probeWorker) probe(at time.Time) {
	ct, pr := w.ct, w.ct.pr
	pr.mu.Lock()
	skip := !ct.running || w.hold ||
		at.Sub(ct.startedAt) < time.Duration(w.spec.InitialDelaySeconds)*time.Second ||
		(w.kind != probeStartup && !ct.started) || (w.kind == probeStartup && ct.started)
	health := pr.health
	app := pr.app
	pr.mu.Unlock()
	if skip {
		return
	}
	ok := pr.c.runProbe(pr, ct, &w.spec, health, app)
	res := resultFailure
	if ok {
		res = resultSuccess
	}
	pr.mu.Lock()
	if w.last == res {
		w.run++
	} else {
		w.last, w.run = res, 1
	}
	if (res == resultFailure && w.run < int(w.spec.FailureThreshold)) || (res == resultSuccess && w.run < int(w.spec.SuccessThreshold)) {
		pr.mu.Unlock()
		return
	}
	restart := false
	switch w.kind {
	case probeReadiness:
		ct.ready = ok
	case probeStartup:
		ct.started = ok
		restart = !ok
	case probeLiveness:
		restart = !ok
	}
	if restart {
		w.hold = true
	}
	pr.mu.Unlock()
	if restart {
		pr.restart(ct, at, fmt.Sprintf("%s probe failed %d times in a row", w.kind, w.spec.FailureThreshold))
		return
	}
	pr.writeStatus(w.kind == probeStartup)
}

// runProbe runs one probe of a container: a TCP handshake from the node's host network
// to the pod's IP at the probe's port, then, for httpGet and grpc, the health endpoint's
// answer.
func (c *Cluster) runProbe(pr *podRun, ct *containerRun, spec *corev1.Probe, health PodHealth, app bool) bool {
	if spec.Exec != nil {
		return true // cannot run in the simulation: documented as always succeeding
	}
	port, ok := probeHandlerPort(spec)
	if !ok {
		return false // no handler: the API server would have refused the pod
	}
	num, ok := probePort(ct, port)
	if !ok {
		return false // a named port the container does not have: the kubelet fails it
	}
	var dst netip.Addr
	if ips := pr.p.IPs(); len(ips) > 0 {
		dst = ips[0]
	}
	r, err := c.ProbeOne(netsim.Probe{
		From: "node:" + pr.node.Name(), Proto: netfilter.ProtoTCP, Mode: netsim.ProbeConnect,
		Dst: netip.AddrPortFrom(dst, num), SrcPort: c.nextProbePort(),
		Timeout: time.Duration(spec.TimeoutSeconds) * time.Second,
	})
	if err != nil || r.Result != netsim.ResultConnected {
		return false
	}
	if spec.TCPSocket != nil || app {
		return true
	}
	s := health.status()
	return s >= 200 && s < 400
}

// probePort resolves a probe's port: a number, or the name of one of the container's ports.
func probePort(ct *containerRun, p intstr.IntOrString) (uint16, bool) {
	if p.Type == intstr.Int {
		return uint16(p.IntVal), p.IntVal > 0 && p.IntVal < 65536
	}
	for _, cp := range ct.ports {
		if cp.Name == p.StrVal {
			return uint16(cp.ContainerPort), true
		}
	}
	return 0, false
}

// nextProbePort is the source port of the next probe: the kubelet's own sequence through
// Linux's ephemeral range, so probes draw nothing from the seeded generator.
func (c *Cluster) nextProbePort() uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probePort++
	if c.probePort < checkPortMin || c.probePort > checkPortMax {
		c.probePort = checkPortMin
	}
	return c.probePort
}

// probeHandlerPort is the port a tcpSocket, httpGet or grpc probe connects to (false:
// the probe has none of these handlers).
func probeHandlerPort(spec *corev1.Probe) (intstr.IntOrString, bool) {
	switch {
	case spec.TCPSocket != nil:
		return spec.TCPSocket.Port, true
	case spec.HTTPGet != nil:
		return spec.HTTPGet.Port, true
	case spec.GRPC != nil:
		return intstr.FromInt32(spec.GRPC.Port), true
	}
	return intstr.IntOrString{}, false
}

// PodListening says whether the pod's built-in servers listen on its containers'
// ports, as far as its health goes: false after SetPodHealth with NotListening (until
// it listens again or a container restarts), true otherwise, and for a pod this
// cluster does not run.
func (c *Cluster) PodListening(ns, name string) bool {
	pr := c.podRunFor(ns, name)
	if pr == nil {
		return true
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return !pr.health.NotListening
}
