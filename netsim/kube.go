package netsim

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

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
type App func(pod *Pod, obj *corev1.Pod) (stop func(), err error)

// RegisterApp makes an app available to pods annotated clusterlab.io/app: name.
func (c *Cluster) RegisterApp(name string, app App) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.apps[name] = app
}

// OnPodStart registers a function the kubelet calls for every pod it starts, before the
// pod is marked running (to give pods a DNS resolver, say).
func (c *Cluster) OnPodStart(f func(pod *Pod, obj *corev1.Pod)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.podStart = append(c.podStart, f)
}

// Proxy is a node's service proxy (a kube-proxy mode) as the cluster drives it: Sync
// brings the node's datapath in line with the store's Services, EndpointSlices and
// Nodes. The cluster calls Sync once when the proxy starts and again after every change,
// after the node's sync delay, never concurrently for one node.
type Proxy interface {
	Sync() error
}

// ProxyFactory builds the proxy of one node (registering its handlers on the node).
type ProxyFactory func(n *Node) (Proxy, error)

// Store returns the cluster's service store: its API server.
func (c *Cluster) Store() *service.Store { return c.store }

// Apply creates or updates objects in the store, all or nothing (see service.Store.Apply).
func (c *Cluster) Apply(objs ...runtime.Object) error { return c.store.Apply(objs...) }

// Errors returns what went wrong in the background (a pod that could not start, a proxy
// sync that failed), oldest first.
func (c *Cluster) Errors() []error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return append([]error(nil), c.errs...)
}

func (c *Cluster) recordErr(err error) {
	c.errMu.Lock()
	c.errs = append(c.errs, err)
	c.errMu.Unlock()
}

// startKube connects the network to the store: registers the nodes, starts the
// simulated kubelets (pods in the store become pods in the network), the proxies and the
// cloud load balancer.
func (c *Cluster) startKube() error {
	if c.store == nil {
		st, err := service.NewStore(service.Config{
			ServiceCIDRs:  c.cfg.ServiceCIDRs,
			NodePortRange: c.cfg.NodePortRange,
			Seed:          c.cfg.Seed,
			Now:           c.clock.Now,
			MasterService: true,
		})
		if err != nil {
			return fmt.Errorf("netsim: %w", err)
		}
		c.store = st
	}
	var nodes []runtime.Object
	for _, n := range c.Nodes() {
		if _, exists := c.store.GetNode(n.name); exists {
			continue
		}
		nodes = append(nodes, n.nodeObject())
	}
	if err := c.store.Apply(nodes...); err != nil {
		return fmt.Errorf("netsim: registering nodes: %w", err)
	}
	// The store calls watchers on the goroutine that changed it: the kubelet's work (pod
	// stacks, app servers) runs under the cluster's label whoever made the change.
	c.cancelWatch = c.store.WatchWithReplay(func(ev service.Event) { c.labeled(func() { c.onEvent(ev) }) })
	if c.cfg.Proxy != nil {
		for _, n := range c.Nodes() {
			p, err := c.cfg.Proxy(n)
			if err != nil {
				return fmt.Errorf("netsim: proxy on node %s: %w", n.name, err)
			}
			n.proxy = p
			n.syncNow()
		}
	}
	return nil
}

// nodeObject is the Node object the node registers, as a kubelet would.
func (n *Node) nodeObject() *corev1.Node {
	labels := map[string]string{"kubernetes.io/hostname": n.name, "kubernetes.io/os": "linux"}
	if n.cfg.Zone != "" {
		labels[corev1.LabelTopologyZone] = n.cfg.Zone
	}
	for k, v := range n.cfg.Labels {
		labels[k] = v
	}
	obj := &corev1.Node{
		TypeMeta:   metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels},
	}
	for _, p := range n.podCIDR {
		obj.Spec.PodCIDRs = append(obj.Spec.PodCIDRs, p.String())
	}
	if len(obj.Spec.PodCIDRs) > 0 {
		obj.Spec.PodCIDR = obj.Spec.PodCIDRs[0]
	}
	for _, ip := range n.ips {
		obj.Status.Addresses = append(obj.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	obj.Status.Addresses = append(obj.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.name})
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
	key := pod.Namespace + "/" + pod.Name
	if pod.Spec.NodeName == "" {
		c.schedule(pod)
		return
	}
	n := c.Node(pod.Spec.NodeName)
	if n == nil || n.down.Load() {
		return // not one of ours (or dead): stays Pending
	}
	if pod.DeletionTimestamp != nil {
		c.scheduleFinalize(pod)
	}
	if c.Pod(pod.Namespace, pod.Name) != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return
	}
	if pod.DeletionTimestamp != nil {
		return // deleted before it started
	}
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
		// Keep IPs given in a dump when they fit the node; else allocate afresh.
		for _, a := range ips {
			if !containsAny(n.podCIDR, a) || n.portOf(a) != nil {
				ips = nil
				break
			}
		}
	}
	p, err := c.StartPod(n.name, pod.Namespace, pod.Name, ips, pod.Spec.HostNetwork)
	if err != nil {
		c.recordErr(fmt.Errorf("kubelet %s: %w", n.name, err))
		return
	}
	c.mu.Lock()
	hooks := append([]func(*Pod, *corev1.Pod){}, c.podStart...)
	app, hasApp := c.apps[pod.Annotations[AnnotationApp]]
	c.mu.Unlock()
	for _, h := range hooks {
		h(p, pod)
	}
	if name := pod.Annotations[AnnotationApp]; name != "" {
		if !hasApp {
			c.recordErr(fmt.Errorf("kubelet %s: pod %s wants app %q, which is not registered", n.name, key, name))
		} else if stop, err := app(p, pod); err != nil {
			c.recordErr(fmt.Errorf("kubelet %s: pod %s: app %s: %w", n.name, key, name, err))
		} else if stop != nil {
			p.mu.Lock()
			p.servers = append(p.servers, stop)
			p.mu.Unlock()
		}
	} else if v := pod.Annotations[AnnotationServe]; v != "false" && v != "none" {
		for _, ct := range pod.Spec.Containers {
			for _, cp := range ct.Ports {
				proto := ProtoTCP
				switch cp.Protocol {
				case corev1.ProtocolUDP:
					proto = ProtoUDP
				case corev1.ProtocolSCTP:
					continue // netstack has no SCTP sockets
				}
				if err := p.Serve(proto, uint16(cp.ContainerPort)); err != nil {
					c.recordErr(fmt.Errorf("kubelet %s: %w", n.name, err))
				}
			}
		}
	}
	st := pod.DeepCopy()
	st.Status.Phase = corev1.PodRunning
	st.Status.PodIPs = nil
	for _, ip := range p.ips {
		st.Status.PodIPs = append(st.Status.PodIPs, corev1.PodIP{IP: ip.String()})
	}
	st.Status.PodIP = st.Status.PodIPs[0].IP
	st.Status.HostIP = n.ips[0].String()
	st.Status.HostIPs = nil
	for _, ip := range n.ips {
		st.Status.HostIPs = append(st.Status.HostIPs, corev1.HostIP{IP: ip.String()})
	}
	now := metav1.NewTime(c.clock.Now())
	st.Status.StartTime = &now
	ready := pod.Annotations[AnnotationReady] != "false"
	setCondition(st, corev1.PodScheduled, true)
	setCondition(st, corev1.PodInitialized, true)
	setCondition(st, corev1.ContainersReady, ready)
	setCondition(st, corev1.PodReady, ready)
	if _, err := c.store.UpdateStatus(st); err != nil {
		c.recordErr(fmt.Errorf("kubelet %s: pod %s status: %w", n.name, key, err))
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

func (n *Node) portOf(a netip.Addr) *podPort {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ports[a]
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
		if n.down.Load() {
			continue
		}
		if best == nil || counts[n.name] < counts[best.name] {
			best = n
		}
	}
	if best == nil {
		return
	}
	b := pod.DeepCopy()
	b.Spec.NodeName = best.name
	if _, err := c.store.Update(b); err != nil {
		c.recordErr(fmt.Errorf("scheduler: bind %s/%s to %s: %w", pod.Namespace, pod.Name, best.name, err))
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
	c.clock.AfterFunc(grace, finalize)
}

// CreatePod creates a pod in the store; the kubelet of its node (chosen by the
// scheduler when spec.nodeName is empty) starts it and marks it ready.
func (c *Cluster) CreatePod(pod *corev1.Pod) (*Pod, error) {
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

// ---- proxy syncs ----

// proxyState is a node's proxy and its sync bookkeeping.
type proxyState struct {
	syncMu      sync.Mutex // held while the proxy syncs
	pendingMu   sync.Mutex
	pending     bool
	queuedAt    time.Time // the oldest change the proxy has not synced yet (zero: none)
	syncs       int
	delay       time.Duration
	delaySet    bool
	paused      bool
	pausedDirty bool
}

// SetSyncDelay sets how long after a change this node's proxy syncs (kube-proxy's sync
// lag): a longer delay on one node reproduces rules updated after a pod died.
func (n *Node) SetSyncDelay(d time.Duration) {
	n.ps.pendingMu.Lock()
	n.ps.delay, n.ps.delaySet = d, true
	n.ps.pendingMu.Unlock()
}

// PauseProxy stops the node's proxy from syncing until ResumeProxy (a hung kube-proxy).
func (n *Node) PauseProxy() {
	n.ps.pendingMu.Lock()
	n.ps.paused = true
	n.ps.pendingMu.Unlock()
}

// ResumeProxy lets the node's proxy sync again, at once if anything changed meanwhile.
func (n *Node) ResumeProxy() {
	n.ps.pendingMu.Lock()
	n.ps.paused = false
	dirty := n.ps.pausedDirty
	n.ps.pausedDirty = false
	n.ps.pendingMu.Unlock()
	if dirty {
		n.syncNow()
	}
}

// ProxySyncs returns how many times the node's proxy has synced.
func (n *Node) ProxySyncs() int {
	n.ps.syncMu.Lock()
	defer n.ps.syncMu.Unlock()
	return n.ps.syncs
}

// Proxy returns the node's proxy, or nil.
func (n *Node) Proxy() Proxy { return n.proxy }

func (c *Cluster) requestSyncs() {
	for _, n := range c.Nodes() {
		if n.proxy != nil && !n.down.Load() {
			n.requestSync()
		}
	}
}

func (n *Node) syncDelay() time.Duration {
	if n.ps.delaySet {
		return n.ps.delay
	}
	return n.cluster.cfg.SyncDelay
}

func (n *Node) requestSync() {
	n.ps.pendingMu.Lock()
	if n.ps.queuedAt.IsZero() {
		n.ps.queuedAt = n.cluster.clock.Now()
	}
	if n.ps.paused {
		n.ps.pausedDirty = true
		n.ps.pendingMu.Unlock()
		return
	}
	d := n.syncDelay()
	if d <= 0 {
		n.ps.pendingMu.Unlock()
		n.syncNow()
		return
	}
	if n.ps.pending {
		n.ps.pendingMu.Unlock()
		return
	}
	n.ps.pending = true
	n.ps.pendingMu.Unlock()
	n.cluster.clock.AfterFunc(d, func() {
		n.ps.pendingMu.Lock()
		n.ps.pending = false
		paused := n.ps.paused
		if paused {
			n.ps.pausedDirty = true
		}
		n.ps.pendingMu.Unlock()
		if !paused && !n.down.Load() {
			n.syncNow()
		}
	})
}

func (n *Node) syncNow() {
	if n.proxy == nil {
		return
	}
	n.ps.syncMu.Lock()
	n.ps.pendingMu.Lock()
	n.ps.queuedAt = time.Time{} // the sync reads everything changed before this point
	n.ps.pendingMu.Unlock()
	n.ps.syncs++
	if err := n.proxy.Sync(); err != nil {
		n.cluster.recordErr(fmt.Errorf("proxy on node %s: sync %d: %w", n.name, n.ps.syncs, err))
	}
	n.ps.syncMu.Unlock()
	// The cloud load balancer health-checks the node at once (see checkAfterSync).
	n.cluster.checkAfterSync(n)
}

// ProxyQueuedSince returns when the oldest change the node's proxy has not synced yet
// happened (a change it was told about, waiting for its sync delay or a paused proxy),
// and false when it is in sync: kube-proxy's QueuedUpdate and Updated, which its
// /healthz answers from.
func (n *Node) ProxyQueuedSince() (time.Time, bool) {
	n.ps.pendingMu.Lock()
	defer n.ps.pendingMu.Unlock()
	return n.ps.queuedAt, !n.ps.queuedAt.IsZero()
}

// SyncProxies makes every live node's proxy sync now (whatever its delay).
func (c *Cluster) SyncProxies() {
	for _, n := range c.Nodes() {
		if n.proxy != nil && !n.down.Load() {
			n.syncNow()
		}
	}
}

// PodNames lists the running pods' keys, sorted (for messages).
func (c *Cluster) podKeys() []string {
	var out []string
	for _, p := range c.Pods() {
		out = append(out, p.key())
	}
	sort.Strings(out)
	return out
}

// AddNode adds a node to a running cluster (a new machine joining): its network, its
// Node object in the store, and its proxy. Its index among the nodes picks its default
// IPs and pod CIDRs, so they do not collide with existing nodes'.
func (c *Cluster) AddNode(nc NodeConfig) (n *Node, err error) {
	c.labeled(func() { n, err = c.addNodeLive(nc) })
	return n, err
}

func (c *Cluster) addNodeLive(nc NodeConfig) (*Node, error) {
	if nc.Name == "" {
		return nil, fmt.Errorf("add node: name required")
	}
	if c.Node(nc.Name) != nil {
		return nil, fmt.Errorf("add node: node %q exists", nc.Name)
	}
	c.mu.Lock()
	idx := c.nodeIndex
	c.nodeIndex++
	c.mu.Unlock()
	n, err := c.addNode(idx, nc)
	if err != nil {
		return nil, err
	}
	if _, err := c.store.Create(n.nodeObject()); err != nil {
		return nil, fmt.Errorf("add node %s: %w", nc.Name, err)
	}
	if c.cfg.Proxy != nil {
		p, err := c.cfg.Proxy(n)
		if err != nil {
			return nil, fmt.Errorf("add node %s: proxy: %w", nc.Name, err)
		}
		n.proxy = p
		n.syncNow()
	}
	return n, nil
}

// RemoveNode takes a node out of the cluster: it dies (its pods with it), its pods and
// Node object are deleted from the store, and the cluster network forgets its routes.
func (c *Cluster) RemoveNode(name string) error {
	n := c.Node(name)
	if n == nil {
		return fmt.Errorf("remove node: no node %q", name)
	}
	if err := c.KillNode(name); err != nil {
		return err
	}
	for _, p := range c.store.ListPods() {
		if p.Spec.NodeName == name {
			if err := c.store.Delete(service.KindPod, p.Namespace, p.Name); err != nil {
				return fmt.Errorf("remove node %s: %w", name, err)
			}
		}
	}
	if err := c.store.Delete(service.KindNode, "", name); err != nil {
		return fmt.Errorf("remove node %s: %w", name, err)
	}
	c.fabric.mu.Lock()
	for ip, m := range c.fabric.nodeIPs {
		if m == n {
			delete(c.fabric.nodeIPs, ip)
		}
	}
	var keep []cidrRoute
	for _, r := range c.fabric.podCIDRs {
		if r.node != n {
			keep = append(keep, r)
		}
	}
	c.fabric.podCIDRs = keep
	c.fabric.unlock()
	c.mu.Lock()
	delete(c.nodes, name)
	var order []*Node
	for _, m := range c.order {
		if m != n {
			order = append(order, m)
		}
	}
	c.order = order
	c.mu.Unlock()
	return nil
}
