package service

import (
	"hash/fnv"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
)

// The EndpointSlice controller and the EndpointSlice mirroring controller,
// run synchronously by the Store after each change that can affect them, so
// their slice writes are ordinary events right after the change that caused
// them.
//
//	Service (selector) ─┐
//	Pods (labels, IPs, ─┼─► desired slices ─► create / update / delete the
//	  readiness, ports) │   per address       service's slices managed by
//	Nodes (zone)       ─┘   family, port set  endpointslice-controller.k8s.io
//	                        and ≤ MaxEndpointsPerSlice
//
//	Endpoints (hand-written, service without selector) ─► slices managed by
//	                                                      endpointslicemirroring-controller.k8s.io
//
// Slice names are "<service>-<5 characters>", the characters a hash of the
// service, address type, port set and chunk, so the same state always gives
// the same names.

// afterChangeLocked runs the controllers for a committed change (old or new
// may be nil).
func (s *Store) afterChangeLocked(kind string, old, obj runtime.Object) {
	if s.cfg.DisableEndpointsController {
		return
	}
	cur := obj
	if cur == nil {
		cur = old
	}
	m := objectMeta(cur)
	switch kind {
	case KindService:
		s.syncServiceLocked(m.Namespace, m.Name)
		s.syncMirrorLocked(m.Namespace, m.Name)
	case KindPod:
		var oldPod, newPod *corev1.Pod
		if old != nil {
			oldPod = old.(*corev1.Pod)
		}
		if obj != nil {
			newPod = obj.(*corev1.Pod)
		}
		if !hasPodIP(oldPod) && !hasPodIP(newPod) {
			// A pod without an IP is in no slice (podAddresses), before or after: the
			// slices, which the controller keeps as desired after every change, stay.
			return
		}
		for _, name := range s.servicesSelectingLocked(m.Namespace, oldPod, newPod) {
			s.syncServiceLocked(m.Namespace, name)
		}
	case KindNode:
		if old != nil && obj != nil && old.(*corev1.Node).Labels[corev1.LabelTopologyZone] == obj.(*corev1.Node).Labels[corev1.LabelTopologyZone] {
			return
		}
		affected := sets.New[string]()
		for _, p := range s.podsOn[m.Name] { // the pods bound to the node (an index, not a scan)
			for _, name := range s.servicesSelectingLocked(p.Namespace, p, nil) {
				affected.Insert(p.Namespace + "/" + name)
			}
		}
		for _, key := range sets.List(affected) {
			ns, name := splitKey(key)
			s.syncServiceLocked(ns, name)
		}
	case KindEndpointSlice:
		// A client changed a slice a controller owns: the controller puts it back.
		switch m.Labels[discoveryv1.LabelManagedBy] {
		case EndpointSliceControllerName:
			s.syncServiceLocked(m.Namespace, m.Labels[discoveryv1.LabelServiceName])
		case MirroringControllerName:
			s.syncMirrorLocked(m.Namespace, m.Labels[discoveryv1.LabelServiceName])
		}
	case KindEndpoints:
		s.syncMirrorLocked(m.Namespace, m.Name)
	}
}

// hasPodIP reports whether a pod (nil: none) has an IP in its status.
func hasPodIP(p *corev1.Pod) bool {
	return p != nil && (len(p.Status.PodIPs) > 0 || p.Status.PodIP != "")
}

// servicesSelectingLocked returns (sorted) the services in ns whose selector
// matches either pod.
func (s *Store) servicesSelectingLocked(ns string, a, b *corev1.Pod) []string {
	if a != nil && b != nil && maps.Equal(a.Labels, b.Labels) {
		b = nil // a status update: one pod's labels to match
	}
	var out []string
	// The candidates: the Services whose selector's first key one of the pods carries
	// with that value, and those with an empty selector (svcBy).
	check := func(names map[string]struct{}) {
		for name := range names {
			svc := s.objs[KindService][ns][name].(*corev1.Service)
			if (a != nil && selects(svc.Spec.Selector, a.Labels)) || (b != nil && selects(svc.Spec.Selector, b.Labels)) {
				out = append(out, name)
			}
		}
	}
	check(s.svcBy[ns+"/"])
	for _, p := range []*corev1.Pod{a, b} {
		if p == nil {
			continue
		}
		for k, v := range p.Labels {
			check(s.svcBy[ns+"/"+k+"="+v])
		}
	}
	sort.Strings(out)
	return slices.Compact(out) // a Service found from both pods' labels
}

// --- EndpointSlice controller ---------------------------------------------

func (s *Store) syncServiceLocked(ns, name string) {
	if name == "" {
		return
	}
	existing := s.slicesForLocked(ns, name, EndpointSliceControllerName)
	var desired []*discoveryv1.EndpointSlice
	if o, ok := s.objs[KindService][ns][name]; ok {
		desired = s.desiredSlicesLocked(o.(*corev1.Service))
	}
	s.reconcileSlicesLocked(existing, desired)
}

// DesiredEndpointSlices computes the slices the EndpointSlice controller
// wants for svc given the store's current pods and nodes (names, labels,
// endpoints and ports, without metadata the store assigns). Services
// without a selector, and ExternalName services, get none.
func (s *Store) DesiredEndpointSlices(svc *corev1.Service) []*discoveryv1.EndpointSlice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.desiredSlicesLocked(svc)
}

func (s *Store) desiredSlicesLocked(svc *corev1.Service) []*discoveryv1.EndpointSlice {
	if svc.Spec.Selector == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	var pods []*corev1.Pod
	if len(svc.Spec.Selector) == 0 { // selects every pod
		for _, o := range s.objs[KindPod][svc.Namespace] {
			pods = append(pods, o.(*corev1.Pod))
		}
	} else {
		pods = s.podsSelectedLocked(svc.Namespace, svc.Spec.Selector)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })

	type group struct {
		at    discoveryv1.AddressType
		key   string
		ports []discoveryv1.EndpointPort
		eps   []discoveryv1.Endpoint
	}
	var out []*discoveryv1.EndpointSlice
	taken := map[string]bool{}
	for _, at := range addressTypesFor(svc) {
		groups := map[string]*group{}
		var keys []string
		for _, pod := range pods {
			if !shouldPodBeInEndpoints(pod) {
				continue
			}
			var node *corev1.Node
			if o, ok := s.objs[KindNode][""][pod.Spec.NodeName]; ok {
				node = o.(*corev1.Node)
			} else if s.cfg.StrictNodes && !svc.Spec.PublishNotReadyAddresses {
				continue
			}
			ep := podToEndpoint(pod, node, svc, at)
			if len(ep.Addresses) == 0 {
				continue
			}
			ports := endpointPorts(svc, pod)
			key := portsKey(ports)
			g := groups[key]
			if g == nil {
				g = &group{at: at, key: key, ports: ports}
				groups[key] = g
				keys = append(keys, key)
			}
			g.eps = append(g.eps, ep)
		}
		sort.Strings(keys)
		if len(keys) == 0 {
			// A service with a selector always has a slice per address type,
			// if only an empty placeholder.
			out = append(out, s.newManagedSlice(svc, at, []discoveryv1.EndpointPort{}, nil, 0, taken))
			continue
		}
		for _, key := range keys {
			g := groups[key]
			for chunk, start := 0, 0; start < len(g.eps); chunk, start = chunk+1, start+s.cfg.MaxEndpointsPerSlice {
				end := min(start+s.cfg.MaxEndpointsPerSlice, len(g.eps))
				out = append(out, s.newManagedSlice(svc, at, g.ports, g.eps[start:end], chunk, taken))
			}
		}
	}
	applyTrafficDistributionHints(svc, out)
	return out
}

// addressTypesFor returns the address types of a service's slices: its
// ipFamilies, else the family of its cluster IP, else both.
func addressTypesFor(svc *corev1.Service) []discoveryv1.AddressType {
	var out []discoveryv1.AddressType
	for _, f := range svc.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			out = append(out, discoveryv1.AddressTypeIPv4)
		case corev1.IPv6Protocol:
			out = append(out, discoveryv1.AddressTypeIPv6)
		}
	}
	if len(out) > 0 {
		return out
	}
	if HasClusterIP(svc) {
		if isIPv6String(svc.Spec.ClusterIP) {
			return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv6}
		}
		return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4}
	}
	return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}
}

// shouldPodBeInEndpoints: not terminal and has an IP (terminating pods stay,
// marked terminating).
func shouldPodBeInEndpoints(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	return pod.Status.PodIP != "" || len(pod.Status.PodIPs) > 0
}

// IsPodReady reports whether the pod's Ready condition is True.
func IsPodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podToEndpoint builds the endpoint for one pod and address type.
func podToEndpoint(pod *corev1.Pod, node *corev1.Node, svc *corev1.Service, at discoveryv1.AddressType) discoveryv1.Endpoint {
	serving := IsPodReady(pod)
	terminating := pod.DeletionTimestamp != nil
	ready := svc.Spec.PublishNotReadyAddresses || (serving && !terminating)
	ep := discoveryv1.Endpoint{
		Addresses:  podAddresses(pod, at),
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		TargetRef:  &corev1.ObjectReference{Kind: KindPod, Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}
	if pod.Spec.NodeName != "" {
		n := pod.Spec.NodeName
		ep.NodeName = &n
	}
	if node != nil && node.Labels[corev1.LabelTopologyZone] != "" {
		z := node.Labels[corev1.LabelTopologyZone]
		ep.Zone = &z
	}
	if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name && pod.Namespace == svc.Namespace {
		h := pod.Spec.Hostname
		ep.Hostname = &h
	}
	return ep
}

// podAddresses returns the pod's IPs of one family, in canonical form,
// leaving out addresses no endpoint may have (loopback, link-local, ...).
func podAddresses(pod *corev1.Pod, at discoveryv1.AddressType) []string {
	ips := pod.Status.PodIPs
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	out := []string{}
	for _, ip := range ips {
		a, err := netip.ParseAddr(ip.IP)
		if err != nil {
			continue
		}
		a = a.Unmap()
		if (at == discoveryv1.AddressTypeIPv6) != a.Is6() {
			continue
		}
		if a.IsUnspecified() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() {
			continue
		}
		out = append(out, a.String())
	}
	return out
}

// FindPort resolves a service port's targetPort for one pod: a number is
// used as is; a name must match a container port's name and protocol
// (regular containers, then sidecars — init containers with restartPolicy
// Always).
func FindPort(pod *corev1.Pod, sp *corev1.ServicePort) (int32, bool) {
	switch sp.TargetPort.Type {
	case intstr.Int:
		return int32(sp.TargetPort.IntValue()), true
	case intstr.String:
		name := sp.TargetPort.StrVal
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == name && p.Protocol == sp.Protocol {
					return p.ContainerPort, true
				}
			}
		}
		for _, c := range pod.Spec.InitContainers {
			if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				continue
			}
			for _, p := range c.Ports {
				if p.Name == name && p.Protocol == sp.Protocol {
					return p.ContainerPort, true
				}
			}
		}
	}
	return 0, false
}

// endpointPorts resolves the service's ports for one pod; a port whose
// named targetPort the pod lacks is left out.
func endpointPorts(svc *corev1.Service, pod *corev1.Pod) []discoveryv1.EndpointPort {
	out := []discoveryv1.EndpointPort{}
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		num, ok := FindPort(pod, sp)
		if !ok {
			continue
		}
		name, proto := sp.Name, sp.Protocol
		out = append(out, discoveryv1.EndpointPort{Name: &name, Port: &num, Protocol: &proto, AppProtocol: sp.AppProtocol})
	}
	return out
}

func portsKey(ports []discoveryv1.EndpointPort) string {
	var b strings.Builder
	for _, p := range ports {
		b.WriteString(derefStr(p.Name))
		b.WriteByte('/')
		b.WriteString(string(derefProto(p.Protocol)))
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(int(derefInt(p.Port))))
		if p.AppProtocol != nil {
			b.WriteByte('/')
			b.WriteString(*p.AppProtocol)
		}
		b.WriteByte(';')
	}
	return b.String()
}

// slicesEqual compares what the controllers write into a slice, without
// reflection (this runs for every slice of a service on every pod change).
func slicesEqual(a, b *discoveryv1.EndpointSlice) bool {
	if a.AddressType != b.AddressType || a.GenerateName != b.GenerateName ||
		!maps.Equal(a.Labels, b.Labels) || !maps.Equal(a.Annotations, b.Annotations) ||
		len(a.OwnerReferences) != len(b.OwnerReferences) || (a.Ports == nil) != (b.Ports == nil) ||
		portsKey(a.Ports) != portsKey(b.Ports) || len(a.Endpoints) != len(b.Endpoints) || (a.Endpoints == nil) != (b.Endpoints == nil) {
		return false
	}
	for i := range a.OwnerReferences {
		if !apiequality.Semantic.DeepEqual(a.OwnerReferences[i], b.OwnerReferences[i]) {
			return false
		}
	}
	for i := range a.Endpoints {
		if !endpointEqual(&a.Endpoints[i], &b.Endpoints[i]) {
			return false
		}
	}
	return true
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func endpointEqual(a, b *discoveryv1.Endpoint) bool {
	if !slices.Equal(a.Addresses, b.Addresses) || !eqPtr(a.Conditions.Ready, b.Conditions.Ready) ||
		!eqPtr(a.Conditions.Serving, b.Conditions.Serving) || !eqPtr(a.Conditions.Terminating, b.Conditions.Terminating) ||
		!eqPtr(a.Hostname, b.Hostname) || !eqPtr(a.NodeName, b.NodeName) || !eqPtr(a.Zone, b.Zone) ||
		!eqPtr(a.TargetRef, b.TargetRef) || !maps.Equal(a.DeprecatedTopology, b.DeprecatedTopology) {
		return false
	}
	if (a.Hints == nil) != (b.Hints == nil) {
		return false
	}
	return a.Hints == nil || (slices.Equal(a.Hints.ForZones, b.Hints.ForZones) && slices.Equal(a.Hints.ForNodes, b.Hints.ForNodes))
}

func derefStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefProto(p *corev1.Protocol) corev1.Protocol {
	if p == nil {
		return ""
	}
	return *p
}

func derefInt(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// sliceName returns prefix + 5 characters from a hash of the inputs.
func sliceName(prefix string, parts ...string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	v := h.Sum64()
	b := make([]byte, 5)
	for i := range b {
		b[i] = alphabet[v%uint64(len(alphabet))]
		v /= uint64(len(alphabet))
	}
	return prefix + string(b)
}

// slicePrefix is the generateName of a service's slices.
func slicePrefix(name string) string {
	p := name + "-"
	if len(apivalidation.NameIsDNSSubdomain(p, true)) != 0 {
		p = name
	}
	return p
}

// uniqueSliceName picks a deterministic name not used by another desired
// slice nor by a stored slice the controller does not own for this service.
func (s *Store) uniqueSliceName(ns, service, managedBy, prefix string, taken map[string]bool, parts ...string) string {
	for i := 0; ; i++ {
		name := sliceName(prefix, append(parts, strconv.Itoa(i))...)
		if taken[name] {
			continue
		}
		if o, ok := s.objs[KindEndpointSlice][ns][name]; ok {
			l := objectMeta(o).Labels
			if l[discoveryv1.LabelManagedBy] != managedBy || l[discoveryv1.LabelServiceName] != service {
				continue
			}
		}
		taken[name] = true
		return name
	}
}

func (s *Store) newManagedSlice(svc *corev1.Service, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps []discoveryv1.Endpoint, chunk int, taken map[string]bool) *discoveryv1.EndpointSlice {
	prefix := slicePrefix(svc.Name)
	lbls := map[string]string{}
	for k, v := range svc.Labels {
		switch k {
		case discoveryv1.LabelServiceName, discoveryv1.LabelManagedBy, corev1.IsHeadlessService:
			continue
		}
		lbls[k] = v
	}
	if !HasClusterIP(svc) {
		lbls[corev1.IsHeadlessService] = ""
	}
	lbls[discoveryv1.LabelServiceName] = svc.Name
	lbls[discoveryv1.LabelManagedBy] = EndpointSliceControllerName
	if eps == nil {
		eps = []discoveryv1.Endpoint{}
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    svc.Namespace,
			Name:         s.uniqueSliceName(svc.Namespace, svc.Name, EndpointSliceControllerName, prefix, taken, svc.Namespace, svc.Name, string(at), portsKey(ports), strconv.Itoa(chunk)),
			GenerateName: prefix,
			Labels:       lbls,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: KindService, Name: svc.Name, UID: svc.UID,
				Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true),
			}},
		},
		AddressType: at,
		Endpoints:   append(make([]discoveryv1.Endpoint, 0, len(eps)), eps...),
		Ports:       ports,
	}
	setTypeMeta(sl)
	return sl
}

// applyTrafficDistributionHints adds the hints of spec.trafficDistribution:
// PreferClose/PreferSameZone give each ready endpoint a hint for its own
// zone, PreferSameNode also one for its own node; otherwise no hints.
func applyTrafficDistributionHints(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) {
	td := ""
	if svc.Spec.TrafficDistribution != nil {
		td = *svc.Spec.TrafficDistribution
	}
	switch td {
	case corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone, corev1.ServiceTrafficDistributionPreferSameNode:
	default:
		return
	}
	for _, sl := range slices {
		for i := range sl.Endpoints {
			ep := &sl.Endpoints[i]
			if ep.Conditions.Ready == nil || !*ep.Conditions.Ready {
				continue
			}
			var h discoveryv1.EndpointHints
			if ep.Zone != nil {
				h.ForZones = []discoveryv1.ForZone{{Name: *ep.Zone}}
			}
			if ep.NodeName != nil && td == corev1.ServiceTrafficDistributionPreferSameNode {
				h.ForNodes = []discoveryv1.ForNode{{Name: *ep.NodeName}}
			}
			if h.ForZones != nil || h.ForNodes != nil {
				ep.Hints = &h
			}
		}
	}
}

// reconcileSlicesLocked makes the stored managed slices equal the desired
// ones: creates first, then updates, then deletes (each by name), so
// consumers never see a gap.
func (s *Store) reconcileSlicesLocked(existing, desired []*discoveryv1.EndpointSlice) {
	have := map[string]*discoveryv1.EndpointSlice{}
	for _, sl := range existing {
		have[sl.Name] = sl
	}
	want := map[string]bool{}
	var creates, updates []*discoveryv1.EndpointSlice
	var olds []*discoveryv1.EndpointSlice
	for _, d := range desired {
		want[d.Name] = true
		old, ok := have[d.Name]
		if !ok {
			creates = append(creates, d)
			continue
		}
		if slicesEqual(d, old) {
			continue
		}
		next := old.DeepCopy()
		next.Labels, next.Annotations, next.OwnerReferences, next.GenerateName = d.Labels, d.Annotations, d.OwnerReferences, d.GenerateName
		next.AddressType, next.Endpoints, next.Ports = d.AddressType, d.Endpoints, d.Ports
		updates = append(updates, next)
		olds = append(olds, old)
	}
	for _, d := range creates {
		d.UID = s.newUID()
		d.CreationTimestamp = s.now()
		d.Generation = 1
		defaultEndpointSlice(d)
		s.commit(Added, KindEndpointSlice, nil, d)
	}
	for i, u := range updates {
		u.Generation++
		defaultEndpointSlice(u)
		s.commit(Modified, KindEndpointSlice, olds[i], u)
	}
	for _, sl := range existing {
		if !want[sl.Name] {
			s.commit(Deleted, KindEndpointSlice, sl, nil)
		}
	}
}

// --- mirroring controller ----------------------------------------------------

// syncMirrorLocked mirrors the Endpoints ns/name into EndpointSlices when
// its service exists, is not ExternalName and has no selector, and the
// Endpoints is neither labelled endpointslice.kubernetes.io/skip-mirror=true
// nor a leader-election record (annotation
// control-plane.alpha.kubernetes.io/leader), as the EndpointSlice mirroring
// controller does. Otherwise the mirrored slices are deleted (upstream
// leaves them when the service is deleted or becomes ExternalName).
func (s *Store) syncMirrorLocked(ns, name string) {
	if name == "" {
		return
	}
	existing := s.slicesForLocked(ns, name, MirroringControllerName)
	var desired []*discoveryv1.EndpointSlice
	eo, epOK := s.objs[KindEndpoints][ns][name]
	so, svcOK := s.objs[KindService][ns][name]
	if epOK && svcOK {
		svc, ep := so.(*corev1.Service), eo.(*corev1.Endpoints)
		_, leader := ep.Annotations[leaderElectionAnnotation]
		if svc.Spec.Selector == nil && svc.Spec.Type != corev1.ServiceTypeExternalName &&
			ep.Labels[discoveryv1.LabelSkipMirror] != "true" && !leader {
			desired = s.mirrorSlicesLocked(ep)
		}
	}
	s.reconcileSlicesLocked(existing, desired)
}

// leaderElectionAnnotation marks an Endpoints object used as a leader
// election lock (client-go resourcelock), which is never mirrored.
const leaderElectionAnnotation = "control-plane.alpha.kubernetes.io/leader"

// MaxMirroredEndpointsPerSubset is how many addresses of one Endpoints
// subset the mirroring controller mirrors (kube-controller-manager
// --mirroring-max-endpoints-per-subset, default 1000); the rest are
// skipped. Each subset becomes one slice per address family.
const MaxMirroredEndpointsPerSubset = 1000

// mirrorSlicesLocked computes the mirrored slices of ep: its subsets are
// repacked (RepackSubsets), then each subset gives one slice per address
// family with up to MaxMirroredEndpointsPerSubset endpoints (ready for
// addresses, not ready for notReadyAddresses; hostname, nodeName and
// targetRef copied; addresses that are not IPs skipped).
func (s *Store) mirrorSlicesLocked(ep *corev1.Endpoints) []*discoveryv1.EndpointSlice {
	type group struct {
		at    discoveryv1.AddressType
		ports []discoveryv1.EndpointPort
		eps   []discoveryv1.Endpoint
		index map[string]int // endpoint identity → position in eps
	}
	groups := map[string]*group{}
	var keys []string
	for _, ss := range RepackSubsets(ep.Subsets) {
		ports := []discoveryv1.EndpointPort{}
		for _, p := range ss.Ports {
			name, port, proto := p.Name, p.Port, p.Protocol
			var app *string
			if p.AppProtocol != nil {
				app = ptrTo(*p.AppProtocol)
			}
			ports = append(ports, discoveryv1.EndpointPort{Name: &name, Port: &port, Protocol: &proto, AppProtocol: app})
		}
		pk := portsKey(ports)
		n := 0
		add := func(a corev1.EndpointAddress, ready bool) {
			if n >= MaxMirroredEndpointsPerSubset {
				return
			}
			ip, err := netip.ParseAddr(a.IP)
			if err != nil {
				return // not mirrored, and not counted
			}
			at := discoveryv1.AddressTypeIPv4
			if ip.Is6() && !ip.Is4In6() {
				at = discoveryv1.AddressTypeIPv6
			}
			e := discoveryv1.Endpoint{Addresses: []string{ip.Unmap().String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(ready)}}
			if a.Hostname != "" {
				e.Hostname = ptrTo(a.Hostname)
			}
			if a.NodeName != nil {
				e.NodeName = ptrTo(*a.NodeName)
			}
			id := e.Addresses[0] + "|" + a.Hostname
			if a.TargetRef != nil {
				e.TargetRef = a.TargetRef.DeepCopy()
				id += "|" + a.TargetRef.Namespace + "/" + a.TargetRef.Name
			}
			key := string(at) + "|" + pk
			g := groups[key]
			if g == nil {
				g = &group{at: at, ports: ports, index: map[string]int{}}
				groups[key] = g
				keys = append(keys, key)
			}
			// The controller keeps endpoints in a set keyed by address,
			// hostname and target: a repeat replaces the earlier one.
			if i, dup := g.index[id]; dup {
				g.eps[i] = e
			} else {
				g.index[id] = len(g.eps)
				g.eps = append(g.eps, e)
			}
			n++
		}
		for _, a := range ss.Addresses {
			add(a, true)
		}
		for _, a := range ss.NotReadyAddresses {
			add(a, false)
		}
	}
	sort.Strings(keys)

	lbls := map[string]string{}
	for k, v := range ep.Labels {
		lbls[k] = v
	}
	lbls[discoveryv1.LabelServiceName] = ep.Name
	lbls[discoveryv1.LabelManagedBy] = MirroringControllerName
	var annots map[string]string
	for k, v := range ep.Annotations {
		if k == corev1.EndpointsLastChangeTriggerTime || k == corev1.LastAppliedConfigAnnotation {
			continue
		}
		if annots == nil {
			annots = map[string]string{}
		}
		annots[k] = v
	}
	prefix := slicePrefix(ep.Name)
	taken := map[string]bool{}
	var out []*discoveryv1.EndpointSlice
	for _, key := range keys {
		g := groups[key]
		l := map[string]string{}
		for k, v := range lbls {
			l[k] = v
		}
		var a map[string]string
		if annots != nil {
			a = map[string]string{}
			for k, v := range annots {
				a[k] = v
			}
		}
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:    ep.Namespace,
				Name:         s.uniqueSliceName(ep.Namespace, ep.Name, MirroringControllerName, prefix, taken, "mirror", ep.Namespace, ep.Name, key, "0"),
				GenerateName: prefix,
				Labels:       l,
				Annotations:  a,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: KindEndpoints, Name: ep.Name, UID: ep.UID,
					Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true),
				}},
			},
			AddressType: g.at,
			Endpoints:   g.eps,
			Ports:       g.ports,
		}
		setTypeMeta(sl)
		out = append(out, sl)
	}
	return out
}
