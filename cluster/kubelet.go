package cluster

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Annotations a pod can carry to steer the simulated kubelet.
const (
	// AnnotationServe, "false" or "none", stops the kubelet from running the built-in
	// whoami server on the pod's container ports (it does by default).
	AnnotationServe = "clusterlab.io/serve"
	// AnnotationReady, "false", starts the pod not ready (its Ready condition false)
	// until Cluster.SetPodReady says otherwise.
	AnnotationReady = "clusterlab.io/ready"
	// AnnotationApp names an app registered with Cluster.RegisterApp that the kubelet
	// runs in the pod instead of the built-in server (the cluster DNS server, say).
	AnnotationApp = "clusterlab.io/app"
)

// App runs a program inside a pod: it starts its servers on pod.Net() and returns a
// function that stops them (called when the pod dies).
type App func(pod *netsim.Pod, obj *corev1.Pod) (stop func(), err error)

// RegisterApp makes an app available to pods annotated clusterlab.io/app: name.
func (c *Cluster) RegisterApp(name string, app App) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.apps[name] = app
}

// OnPodStart registers a function the kubelet calls for every pod it starts, before the
// pod is marked running (to give pods a DNS resolver, say).
func (c *Cluster) OnPodStart(f func(pod *netsim.Pod, obj *corev1.Pod)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.podStart = append(c.podStart, f)
}

// start connects the network to the store: registers the nodes, starts the simulated
// kubelets (pods in the store become pods in the network), the proxies and the cloud
// load balancer.
func (c *Cluster) start() error {
	if c.store == nil {
		apiserver := c.apiServerAddr()
		st, err := service.NewStore(service.Config{
			ServiceCIDRs:     c.cfg.ServiceCIDRs,
			NodePortRange:    c.cfg.NodePortRange,
			Seed:             c.cfg.Seed,
			Now:              c.Clock().Now,
			MasterService:    true,
			APIServerAddress: apiserver,
		})
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		c.store = st
		if err := c.serveAPIServer(apiserver); err != nil {
			return err
		}
	}
	var nodes []runtime.Object
	for _, n := range c.Nodes() {
		if _, exists := c.store.GetNode(n.Name()); exists {
			continue
		}
		nodes = append(nodes, n.nodeObject())
	}
	if err := c.store.Apply(nodes...); err != nil {
		return fmt.Errorf("cluster: registering nodes: %w", err)
	}
	// The store calls watchers on the goroutine that changed it: the kubelet's work (pod
	// stacks, app servers) runs as the network's own whoever made the change.
	cancel := c.store.WatchWithReplay(func(ev service.Event) { c.Do(func() { c.onEvent(ev) }) })
	c.mu.Lock()
	c.cancelWatch = cancel
	c.mu.Unlock()
	c.proxiesUp.Store(c.cfg.Proxy != nil)
	for _, n := range c.Nodes() {
		if err := n.startProxy(); err != nil {
			return err
		}
	}
	return nil
}

// apiServerAddr is where the API server listens: the first node is the control plane,
// as kind's and kubeadm's are, and the API server a hostNetwork static pod on it, so
// default/kubernetes's endpoint is that node's address (in the family of the primary
// service range), port 6443. The zero Addr when the node has no such address.
func (c *Cluster) apiServerAddr() netip.Addr {
	nodes := c.Nodes()
	if len(nodes) == 0 || c.cfg.NoAPIServer {
		return netip.Addr{}
	}
	want4 := len(c.cfg.ServiceCIDRs) == 0 || c.cfg.ServiceCIDRs[0].Addr().Is4()
	for _, ip := range nodes[0].IPs() {
		if ip.Is4() == want4 {
			return ip
		}
	}
	return netip.Addr{}
}

// serveAPIServer answers on TCP 6443 of the control-plane node's host network (the
// built-in whoami server stands for the API server), so that connections to the
// kubernetes Service connect.
func (c *Cluster) serveAPIServer(addr netip.Addr) error {
	if !addr.IsValid() {
		return nil
	}
	n := c.Nodes()[0]
	if _, err := netsim.ServeWhoami(n.HostNet(), "", n.Name(), netfilter.ProtoTCP, service.APIServerPort); err != nil {
		return fmt.Errorf("cluster: the API server on %s: %w", n.Name(), err)
	}
	return nil
}

// nodeObject is the Node object the node registers, as a kubelet would.
func (n *Node) nodeObject() *corev1.Node {
	labels := map[string]string{"kubernetes.io/hostname": n.Name(), "kubernetes.io/os": "linux"}
	if n.cfg.Zone != "" {
		labels[corev1.LabelTopologyZone] = n.cfg.Zone
	}
	for k, v := range n.cfg.Labels {
		labels[k] = v
	}
	obj := &corev1.Node{
		TypeMeta:   metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: n.Name(), Labels: labels},
	}
	for _, p := range n.PodCIDRs() {
		obj.Spec.PodCIDRs = append(obj.Spec.PodCIDRs, p.String())
	}
	if len(obj.Spec.PodCIDRs) > 0 {
		obj.Spec.PodCIDR = obj.Spec.PodCIDRs[0]
	}
	for _, ip := range n.IPs() {
		obj.Status.Addresses = append(obj.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	obj.Status.Addresses = append(obj.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.Name()})
	obj.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	return obj
}

func (c *Cluster) onEvent(ev service.Event) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return
	}
	c.policyEvent(ev)
	switch ev.Kind {
	case service.KindPod:
		c.kubelet(ev)
	case service.KindService:
		c.lbController(ev)
		c.requestSyncs()
	case service.KindEndpointSlice, service.KindNode:
		c.requestSyncs()
	}
}

// kubelet reacts to pod events as the pod's kubelet would.
func (c *Cluster) kubelet(ev service.Event) {
	switch ev.Type {
	case service.Deleted:
		old := ev.Old.(*corev1.Pod)
		c.StopPod(old.Namespace, old.Name)
		return
	}
	pod := ev.New.(*corev1.Pod)
	if pod.Spec.NodeName == "" {
		c.schedule(pod)
		return
	}
	n := c.Node(pod.Spec.NodeName)
	if n == nil || n.Down() {
		return // not one of ours (or dead): stays Pending
	}
	if pod.DeletionTimestamp != nil {
		c.scheduleFinalize(pod)
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		// Its containers have exited for good: the pod's network goes with them.
		if p := c.Pod(pod.Namespace, pod.Name); p != nil {
			c.StopPod(pod.Namespace, pod.Name)
		}
		return
	}
	if c.Pod(pod.Namespace, pod.Name) != nil {
		return
	}
	if pod.DeletionTimestamp != nil {
		return // deleted before it started
	}
	p, err := c.StartPod(n.Name(), pod.Namespace, pod.Name, n.keptPodIPs(pod), pod.Spec.HostNetwork)
	if err != nil {
		c.recordErr(fmt.Errorf("kubelet %s: %w", n.Name(), err))
		return
	}
	pr := c.runContainers(n, p, pod)
	c.markRunning(n, p, pod, pr)
}

// keptPodIPs returns the pod IPs a pod's status gives (a dump's) when they fit the node
// and are free; else nil, and the network allocates afresh.
func (n *Node) keptPodIPs(pod *corev1.Pod) []netip.Addr {
	var ips []netip.Addr
	for _, s := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(s.IP); err == nil {
			ips = append(ips, a)
		}
	}
	if len(ips) == 0 && pod.Status.PodIP != "" {
		if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
			ips = append(ips, a)
		}
	}
	if len(ips) > 0 && !pod.Spec.HostNetwork {
		for _, a := range ips {
			if !containsAny(n.PodCIDRs(), a) || n.PodAt(a) != nil {
				return nil
			}
		}
	}
	return ips
}

// runContainers runs what the pod runs: the OnPodStart hooks, then its app
// (clusterlab.io/app) or the built-in whoami server on every TCP and UDP port of its
// containers — its sidecars (init containers with restartPolicy Always) first, as the
// kubelet starts them before the regular containers — and the containers' probes
// (containers.go), whose first round runs now.
func (c *Cluster) runContainers(n *Node, p *netsim.Pod, pod *corev1.Pod) *podRun {
	key := pod.Namespace + "/" + pod.Name
	c.mu.Lock()
	hooks := append([]func(*netsim.Pod, *corev1.Pod){}, c.podStart...)
	app, hasApp := c.apps[pod.Annotations[AnnotationApp]]
	c.mu.Unlock()
	for _, h := range hooks {
		h(p, pod)
	}
	pr := c.newPodRun(n, p, pod)
	if name := pod.Annotations[AnnotationApp]; name != "" {
		pr.mu.Lock()
		pr.app = true
		pr.mu.Unlock()
		if !hasApp {
			c.recordErr(fmt.Errorf("kubelet %s: pod %s wants app %q, which is not registered", n.Name(), key, name))
		} else if stop, err := app(p, pod); err != nil {
			c.recordErr(fmt.Errorf("kubelet %s: pod %s: app %s: %w", n.Name(), key, name, err))
		} else if stop != nil {
			p.OnKill(stop)
		}
	} else if v := pod.Annotations[AnnotationServe]; v != "false" && v != "none" {
		pr.mu.Lock()
		pr.serve = true
		pr.mu.Unlock()
	}
	pr.startContainers()
	return pr
}

// markRunning writes the started pod's status: Running, its IPs and its node's, its
// containers' statuses, ready unless clusterlab.io/ready says "false" or a container's
// readiness (or startup) probe has not passed yet.
func (c *Cluster) markRunning(n *Node, p *netsim.Pod, pod *corev1.Pod, pr *podRun) {
	st := pod.DeepCopy()
	st.Status.Phase = corev1.PodRunning
	st.Status.PodIPs = nil
	for _, ip := range p.IPs() {
		st.Status.PodIPs = append(st.Status.PodIPs, corev1.PodIP{IP: ip.String()})
	}
	st.Status.PodIP = st.Status.PodIPs[0].IP
	st.Status.HostIP = n.IP().String()
	st.Status.HostIPs = nil
	for _, ip := range n.IPs() {
		st.Status.HostIPs = append(st.Status.HostIPs, corev1.HostIP{IP: ip.String()})
	}
	now := metav1.NewTime(c.Clock().Now())
	st.Status.StartTime = &now
	ready := pr.readyNow()
	pr.mu.Lock()
	st.Status.InitContainerStatuses, st.Status.ContainerStatuses = pr.containerStatusesLocked()
	pr.mu.Unlock()
	setCondition(st, corev1.PodScheduled, true)
	setCondition(st, corev1.PodInitialized, true)
	setCondition(st, corev1.ContainersReady, ready)
	setCondition(st, corev1.PodReady, ready)
	if _, err := c.store.UpdateStatus(st); err != nil {
		c.recordErr(fmt.Errorf("kubelet %s: pod %s status: %w", n.Name(), pod.Namespace+"/"+pod.Name, err))
	}
}

func containsAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func setCondition(p *corev1.Pod, t corev1.PodConditionType, v bool) {
	st := corev1.ConditionFalse
	if v {
		st = corev1.ConditionTrue
	}
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			p.Status.Conditions[i].Status = st
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: st})
}

// schedule binds an unscheduled pod to the live node with the fewest pods (ties broken
// by configuration order): a deterministic scheduler.
func (c *Cluster) schedule(pod *corev1.Pod) {
	counts := map[string]int{}
	for _, p := range c.store.ListPods() {
		if p.Spec.NodeName != "" {
			counts[p.Spec.NodeName]++
		}
	}
	var best *Node
	for _, n := range c.Nodes() {
		if n.Down() {
			continue
		}
		if best == nil || counts[n.Name()] < counts[best.Name()] {
			best = n
		}
	}
	if best == nil {
		return
	}
	b := pod.DeepCopy()
	b.Spec.NodeName = best.Name()
	if _, err := c.store.Update(b); err != nil {
		c.recordErr(fmt.Errorf("scheduler: bind %s/%s to %s: %w", pod.Namespace, pod.Name, best.Name(), err))
	}
}

// scheduleFinalize removes a terminating pod when its grace period is over: its network
// dies and its object goes.
func (c *Cluster) scheduleFinalize(pod *corev1.Pod) {
	key := pod.Namespace + "/" + pod.Name
	c.mu.Lock()
	if c.finalizing[key] {
		c.mu.Unlock()
		return
	}
	c.finalizing[key] = true
	c.mu.Unlock()
	grace := time.Duration(0)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	uid := pod.UID
	finalize := func() {
		c.mu.Lock()
		delete(c.finalizing, key)
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return
		}
		cur, ok := c.store.GetPod(pod.Namespace, pod.Name)
		if !ok || cur.UID != uid {
			return
		}
		c.StopPod(pod.Namespace, pod.Name)
		if err := c.store.Delete(service.KindPod, pod.Namespace, pod.Name); err != nil {
			c.recordErr(fmt.Errorf("kubelet: finalize %s: %w", key, err))
		}
	}
	c.Clock().AfterFunc(grace, finalize)
}

// CreatePod creates a pod in the store; the kubelet of its node (chosen by the
// scheduler when spec.nodeName is empty) starts it and marks it ready.
func (c *Cluster) CreatePod(pod *corev1.Pod) (*netsim.Pod, error) {
	if _, err := c.store.Create(pod); err != nil {
		return nil, err
	}
	cur, _ := c.store.GetPod(pod.Namespace, pod.Name)
	if cur == nil {
		return nil, fmt.Errorf("pod %s/%s vanished", pod.Namespace, pod.Name)
	}
	p := c.Pod(cur.Namespace, cur.Name)
	if p == nil {
		return nil, fmt.Errorf("pod %s/%s did not start (node %q): %v", pod.Namespace, pod.Name, cur.Spec.NodeName, c.Errors())
	}
	return p, nil
}

// DeletePod deletes a pod through the store: with grace > 0 it terminates (its endpoints
// turn terminating, its network keeps running) until the grace period passes on the
// virtual clock; with grace 0 it dies at once.
func (c *Cluster) DeletePod(namespace, name string, grace time.Duration) error {
	return c.store.DeletePod(namespace, name, grace)
}

// SetPodReady sets a pod's Ready condition, as a readiness probe would.
func (c *Cluster) SetPodReady(namespace, name string, ready bool) error {
	p, ok := c.store.GetPod(namespace, name)
	if !ok {
		return fmt.Errorf("no pod %s/%s", namespace, name)
	}
	st := p.DeepCopy()
	setCondition(st, corev1.PodReady, ready)
	setCondition(st, corev1.ContainersReady, ready)
	_, err := c.store.UpdateStatus(st)
	return err
}
