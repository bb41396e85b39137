package netpol

import (
	"errors"
	"net/netip"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Index holds policies, namespaces and pods and answers policy decisions
// without looping over the policies that do not select the pod: policies
// are bucketed per namespace by one "anchor" of their podSelector (the
// empty selector's bucket, one label key=value, or a key that must exist),
// so a pod's candidates are found through its own labels, and the policies
// selecting each pod are cached until a policy of its namespace or the pod
// changes. It is safe for concurrent use.
type Index struct {
	mu         sync.Mutex
	policies   map[PolicyRef]*compiled
	byNS       map[string]*nsBucket
	pods       map[string]*Pod
	byIP       map[netip.Addr]*Pod
	namespaces map[string]labels.Set
	cache      map[string]*selection2
}

// selection2 is the cached list of policies selecting a pod.
type selection2 struct {
	gen uint64 // the namespace bucket's generation it was computed at
	sel [2][]*compiled
}

// nsBucket holds one namespace's policies by the anchor of their
// podSelector. A policy is in exactly one of the maps (an `In` anchor puts
// it under several values of one key, of which a pod has at most one).
type nsBucket struct {
	gen   uint64
	all   map[PolicyRef]*compiled            // empty podSelector
	kv    map[string]map[PolicyRef]*compiled // "key\x00value"
	key   map[string]map[PolicyRef]*compiled // key must exist
	other map[PolicyRef]*compiled            // only NotIn / DoesNotExist
}

func newBucket() *nsBucket {
	return &nsBucket{
		all: map[PolicyRef]*compiled{}, kv: map[string]map[PolicyRef]*compiled{},
		key: map[string]map[PolicyRef]*compiled{}, other: map[PolicyRef]*compiled{},
	}
}

// anchors returns where a podSelector files a policy: kind "all", "kv"
// (with keys "k\x00v"), "key" (one key) or "other".
func anchors(s *metav1.LabelSelector) (kind string, keys []string) {
	if len(s.MatchLabels) > 0 {
		ks := make([]string, 0, len(s.MatchLabels))
		for k := range s.MatchLabels {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return "kv", []string{ks[0] + "\x00" + s.MatchLabels[ks[0]]}
	}
	for _, e := range s.MatchExpressions {
		if e.Operator == metav1.LabelSelectorOpIn && len(e.Values) > 0 {
			for _, v := range e.Values {
				keys = append(keys, e.Key+"\x00"+v)
			}
			return "kv", keys
		}
	}
	for _, e := range s.MatchExpressions {
		if e.Operator == metav1.LabelSelectorOpExists {
			return "key", []string{e.Key}
		}
	}
	if len(s.MatchExpressions) == 0 {
		return "all", nil
	}
	return "other", nil
}

func (b *nsBucket) add(c *compiled) {
	kind, keys := anchors(&c.pol.Spec.PodSelector)
	switch kind {
	case "all":
		b.all[c.ref] = c
	case "other":
		b.other[c.ref] = c
	case "kv", "key":
		m := b.kv
		if kind == "key" {
			m = b.key
		}
		for _, k := range keys {
			if m[k] == nil {
				m[k] = map[PolicyRef]*compiled{}
			}
			m[k][c.ref] = c
		}
	}
	b.gen++
}

func (b *nsBucket) remove(c *compiled) {
	kind, keys := anchors(&c.pol.Spec.PodSelector)
	switch kind {
	case "all":
		delete(b.all, c.ref)
	case "other":
		delete(b.other, c.ref)
	case "kv", "key":
		m := b.kv
		if kind == "key" {
			m = b.key
		}
		for _, k := range keys {
			delete(m[k], c.ref)
			if len(m[k]) == 0 {
				delete(m, k)
			}
		}
	}
	b.gen++
}

// candidates calls f with every policy of the bucket that may select a pod
// with these labels (each once).
func (b *nsBucket) candidates(l map[string]string, f func(*compiled)) {
	for _, c := range b.all {
		f(c)
	}
	for _, c := range b.other {
		f(c)
	}
	for k, v := range l {
		for _, c := range b.kv[k+"\x00"+v] {
			f(c)
		}
		for _, c := range b.key[k] {
			f(c)
		}
	}
}

// NewIndex builds an index. Policies that cannot be evaluated (invalid
// selectors, CIDRs) are reported together and left out.
func NewIndex(policies []*networkingv1.NetworkPolicy, namespaces []Namespace, pods []Pod) (*Index, error) {
	ix := &Index{
		policies:   make(map[PolicyRef]*compiled, len(policies)),
		byNS:       map[string]*nsBucket{},
		pods:       make(map[string]*Pod, len(pods)),
		byIP:       make(map[netip.Addr]*Pod, len(pods)),
		namespaces: make(map[string]labels.Set, len(namespaces)),
		cache:      map[string]*selection2{},
	}
	for _, n := range namespaces {
		ix.SetNamespace(n)
	}
	for _, p := range pods {
		ix.SetPod(p)
	}
	var errs []error
	for _, p := range policies {
		if err := ix.SetPolicy(p); err != nil {
			errs = append(errs, err)
		}
	}
	return ix, errors.Join(errs...)
}

// SetPolicy adds or replaces a policy (keyed by namespace/name; an empty
// namespace is "default"). On error the index is unchanged.
func (ix *Index) SetPolicy(p *networkingv1.NetworkPolicy) error {
	c, err := compile(p)
	if err != nil {
		return err
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.deletePolicy(c.ref)
	ix.policies[c.ref] = c
	b := ix.byNS[c.ref.Namespace]
	if b == nil {
		b = newBucket()
		ix.byNS[c.ref.Namespace] = b
	}
	b.add(c)
	return nil
}

// DeletePolicy removes a policy if present.
func (ix *Index) DeletePolicy(namespace, name string) {
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.deletePolicy(PolicyRef{namespace, name})
}

func (ix *Index) deletePolicy(ref PolicyRef) {
	old := ix.policies[ref]
	if old == nil {
		return
	}
	delete(ix.policies, ref)
	ix.byNS[ref.Namespace].remove(old)
}

// SetPod adds or replaces a pod (keyed by namespace/name). The index keeps
// its own copy.
func (ix *Index) SetPod(p Pod) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	key := p.Key()
	ix.deletePod(key)
	np := p
	np.Labels = cloneMap(p.Labels)
	np.IPs = append([]netip.Addr(nil), p.IPs...)
	np.Ports = append([]corev1.ContainerPort(nil), p.Ports...)
	ix.pods[key] = &np
	if !np.HostNetwork {
		for _, a := range np.IPs {
			ix.byIP[a.Unmap()] = &np
		}
	}
}

// DeletePod removes a pod if present.
func (ix *Index) DeletePod(namespace, name string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.deletePod(namespace + "/" + name)
}

func (ix *Index) deletePod(key string) {
	old := ix.pods[key]
	if old == nil {
		return
	}
	delete(ix.pods, key)
	delete(ix.cache, key)
	for _, a := range old.IPs {
		if ix.byIP[a.Unmap()] == old {
			delete(ix.byIP, a.Unmap())
		}
	}
}

// SetNamespace adds or replaces a namespace's labels.
func (ix *Index) SetNamespace(n Namespace) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.namespaces[n.Name] = nsLabels(n.Name, n.Labels)
}

// DeleteNamespace forgets a namespace's labels (it keeps the implied name
// label). Its pods and policies stay until deleted.
func (ix *Index) DeleteNamespace(name string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	delete(ix.namespaces, name)
}

func (ix *Index) nsLabelsOf(name string) labels.Set {
	if l, ok := ix.namespaces[name]; ok {
		return l
	}
	return labels.Set{NamespaceNameLabel: name}
}

// PodByIP returns the pod with that address: nil for no pod and for
// hostNetwork pods (their address is their node's). The pod is the index's
// own: read-only.
func (ix *Index) PodByIP(a netip.Addr) *Pod {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.byIP[a.Unmap()]
}

// Pods returns the pods sorted by key. They are the index's own: read-only.
// SetPod replaces a pod with a new one (a pointer held from before keeps the
// old labels and is then decided as given, without the cache), so look pods
// up again after updates.
func (ix *Index) Pods() []*Pod {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := make([]*Pod, 0, len(ix.pods))
	for _, p := range ix.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// Policies returns the policies sorted by namespace/name.
func (ix *Index) Policies() []*networkingv1.NetworkPolicy {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	refs := make([]PolicyRef, 0, len(ix.policies))
	for r := range ix.policies {
		refs = append(refs, r)
	}
	sortRefs(refs)
	out := make([]*networkingv1.NetworkPolicy, len(refs))
	for i, r := range refs {
		out[i] = ix.policies[r].pol
	}
	return out
}

// selecting returns the policies selecting the pod for the direction,
// sorted, from the cache when the pod is the index's own.
func (ix *Index) selecting(dir Direction, pod *Pod) []*compiled {
	if pod == nil || pod.HostNetwork {
		return nil
	}
	b := ix.byNS[pod.Namespace]
	if b == nil {
		return nil
	}
	key := pod.Key()
	own := ix.pods[key] == pod
	if own {
		if s := ix.cache[key]; s != nil && s.gen == b.gen {
			return s.sel[dir]
		}
	}
	var s selection2
	s.gen = b.gen
	b.candidates(pod.Labels, func(c *compiled) {
		for d := Ingress; d <= Egress; d++ {
			if c.selects(d, pod) {
				s.sel[d] = append(s.sel[d], c)
			}
		}
	})
	for d := range s.sel {
		sort.Slice(s.sel[d], func(i, j int) bool { return refLess(s.sel[d][i].ref, s.sel[d][j].ref) })
	}
	if own {
		ix.cache[key] = &s
	}
	return s.sel[dir]
}

// Selecting returns the policies that select the pod for the direction,
// sorted by namespace/name.
func (ix *Index) Selecting(dir Direction, pod *Pod) []PolicyRef {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	cs := ix.selecting(dir, pod)
	out := make([]PolicyRef, len(cs))
	for i, c := range cs {
		out[i] = c.ref
	}
	return out
}

// resolve makes a bare address that is a pod's into that pod's peer.
func (ix *Index) resolve(p Peer) Peer {
	if p.Pod == nil && p.IP.IsValid() {
		if pod := ix.byIP[p.IP.Unmap()]; pod != nil {
			return Peer{Pod: pod, IP: p.IP}
		}
	}
	return p
}

// Decide returns the verdict of the pod's policies for the direction, the
// peer being the other end (the source for ingress, the destination for
// egress), port and proto the destination's after DNAT. A peer given as a
// bare address that is a pod's counts as that pod.
func (ix *Index) Decide(dir Direction, pod *Pod, peer Peer, port uint16, proto corev1.Protocol) Decision {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.decide(dir, pod, ix.resolve(peer), port, proto)
}

func (ix *Index) decide(dir Direction, pod *Pod, peer Peer, port uint16, proto corev1.Protocol) Decision {
	d := Decision{Direction: dir, Allowed: true}
	if pod == nil {
		return d
	}
	d.Pod = pod.Key()
	cs := ix.selecting(dir, pod)
	if len(cs) == 0 {
		return d
	}
	d.Isolated, d.Allowed = true, false
	d.Selecting = make([]PolicyRef, len(cs))
	for i, c := range cs {
		d.Selecting[i] = c.ref
	}
	for _, c := range cs {
		if i := c.allows(dir, pod, peer, port, proto, ix.nsLabelsOf); i >= 0 {
			r := &c.rules[dir][i]
			d.Allowed = true
			d.Rule = &RuleRef{Policy: c.ref, Direction: dir, Index: r.index, Text: r.text}
			break
		}
	}
	return d
}

// Verdict decides a connection from src to dst (port and proto the
// destination's after DNAT): egress at src when it is a pod, ingress at
// dst when it is a pod; allowed when both allow. Bare addresses that are
// pods' count as those pods.
func (ix *Index) Verdict(src, dst Peer, port uint16, proto corev1.Protocol) Verdict {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	src, dst = ix.resolve(src), ix.resolve(dst)
	var eg, in *Decision
	if p := src.pod(); p != nil {
		d := ix.decide(Egress, p, dst, port, proto)
		eg = &d
	}
	if p := dst.pod(); p != nil {
		d := ix.decide(Ingress, p, src, port, proto)
		in = &d
	}
	return verdictOf(src, dst, port, proto, eg, in)
}

// Allowed is Verdict(src, dst, port, proto).Allowed without building the
// decisions and their text: what a datapath asks per new connection.
func (ix *Index) Allowed(src, dst Peer, port uint16, proto corev1.Protocol) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	src, dst = ix.resolve(src), ix.resolve(dst)
	if p := src.pod(); p != nil && !ix.allowedDir(Egress, p, dst, port, proto) {
		return false
	}
	if p := dst.pod(); p != nil && !ix.allowedDir(Ingress, p, src, port, proto) {
		return false
	}
	return true
}

func (ix *Index) allowedDir(dir Direction, pod *Pod, peer Peer, port uint16, proto corev1.Protocol) bool {
	cs := ix.selecting(dir, pod)
	if len(cs) == 0 {
		return true
	}
	for _, c := range cs {
		if c.allows(dir, pod, peer, port, proto, ix.nsLabelsOf) >= 0 {
			return true
		}
	}
	return false
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
