package alloc

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// DefaultLeakPasses is how many consecutive repair passes must see a value
// leaked before Repair frees it: kube-apiserver's numRepairsBeforeLeakCleanup.
// The delay keeps a pass from freeing a value that an in-flight create has
// allocated but not yet stored.
const DefaultLeakPasses = 3

// ProblemKind classifies what a repair pass found.
type ProblemKind string

const (
	// Leaked: allocated, but no service uses it.
	Leaked ProblemKind = "Leaked"
	// Missing: a service uses it, but it is not marked allocated.
	Missing ProblemKind = "NotAllocated"
	// Duplicate: two or more services (or one service twice) claim it.
	Duplicate ProblemKind = "AlreadyAllocated"
	// OutOfRange: a service uses a value outside every configured range.
	OutOfRange ProblemKind = "OutOfRange"
	// Invalid: a service's clusterIP is not an IP address.
	Invalid ProblemKind = "NotValid"
)

// Resource says which allocator a Problem is about.
type Resource string

const (
	ResourceClusterIP Resource = "ClusterIP"
	ResourceNodePort  Resource = "NodePort"
)

// Problem is one finding of a repair pass.
type Problem struct {
	Kind     ProblemKind
	Resource Resource
	// Value is the IP (canonical form; verbatim when Invalid) or the port.
	Value string
	// Services lists "namespace/name" of the claimants in the order the pass
	// met them (services sorted by namespace/name); empty for Leaked. A
	// Duplicate lists every claimant, the first one being the holder.
	Services []string
	// Range is the allocator range the value was checked against, "" when
	// no allocator covers it.
	Range string
	// LeakCount is, for Leaked, how many consecutive Repair passes have now
	// seen it leaked (0 from Check).
	LeakCount int
	// Fixed is true when Repair acted: a Missing value was marked, or a
	// Leaked value was freed.
	Fixed bool
}

// String renders the problem as kube-apiserver's repair loop logs it.
func (p Problem) String() string {
	what := "the ClusterIP " + p.Value
	if p.Resource == ResourceNodePort {
		what = "the node port " + p.Value
	}
	svc := "service " + strings.Join(p.Services, ", ")
	if len(p.Services) > 1 {
		svc = "services " + strings.Join(p.Services, ", ")
	}
	switch p.Kind {
	case Leaked:
		switch {
		case p.Fixed:
			return what + " appears to have leaked: cleaning up"
		case p.LeakCount > 0:
			return fmt.Sprintf("%s may have leaked: flagging for later clean up (pass %d)", what, p.LeakCount)
		default:
			return what + " may have leaked"
		}
	case Missing:
		s := fmt.Sprintf("%s for %s is not allocated", what, svc)
		if p.Fixed {
			s += "; repairing"
		}
		return s
	case Duplicate:
		return fmt.Sprintf("%s for %s was assigned to multiple services; please recreate", what, svc)
	case OutOfRange:
		if p.Range == "" {
			if p.Resource == ResourceNodePort {
				return fmt.Sprintf("%s for %s is not within any configured node port range; please recreate", what, svc)
			}
			return fmt.Sprintf("%s for %s is not within any configured service CIDR; please recreate", what, svc)
		}
		if p.Resource == ResourceNodePort {
			return fmt.Sprintf("%s for %s is not within the port range %s; please recreate", what, svc, p.Range)
		}
		return fmt.Sprintf("%s for %s is not within the service CIDR %s; please recreate", what, svc, p.Range)
	case Invalid:
		return fmt.Sprintf("%s for %s is not a valid IP; please recreate", what, svc)
	}
	return fmt.Sprintf("%s: %s (%s)", p.Kind, what, svc)
}

// Report is the outcome of a repair pass: problems sorted by resource
// (ClusterIPs first), then value (IPs and ports numerically), then kind.
type Report struct {
	Problems []Problem
}

// OK reports whether the pass found nothing.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Filter returns the problems of one kind and resource.
func (r Report) Filter(kind ProblemKind, res Resource) []Problem {
	var out []Problem
	for _, p := range r.Problems {
		if p.Kind == kind && p.Resource == res {
			out = append(out, p)
		}
	}
	return out
}

// String returns one line per problem, or "ok".
func (r Report) String() string {
	if r.OK() {
		return "ok\n"
	}
	var b strings.Builder
	for _, p := range r.Problems {
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// ClusterIPsOf returns the cluster IPs a Service holds: spec.clusterIPs, or
// spec.clusterIP when clusterIPs is empty, without "" and "None".
func ClusterIPsOf(svc *corev1.Service) []string {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []string
	for _, ip := range ips {
		if ip != "" && ip != corev1.ClusterIPNone {
			out = append(out, ip)
		}
	}
	return out
}

// NodePortsOf returns the node ports a Service holds, as Kubernetes' repair
// loop collects them (collectServiceNodePorts): each non-zero
// spec.ports[].nodePort once per protocol, so ports sharing a node port over
// different protocols (53/TCP and 53/UDP) count it once, while a node port
// repeated over the same protocol (which validation forbids) counts again
// and a repair pass reports it as a duplicate; then spec.healthCheckNodePort
// unless it coincides with a node port that no port uses over TCP. So a
// healthCheckNodePort equal to a TCP node port also appears twice. An empty
// protocol counts as TCP (the API server defaults it).
func NodePortsOf(svc *corev1.Service) []int {
	var out []int
	protos := map[int][]corev1.Protocol{}
	for _, p := range svc.Spec.Ports {
		np := int(p.NodePort)
		if np == 0 {
			continue
		}
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		seen, ok := protos[np]
		switch {
		case !ok, slices.Contains(seen, proto):
			out = append(out, np)
		}
		if !slices.Contains(seen, proto) {
			protos[np] = append(seen, proto)
		}
	}
	if hc := int(svc.Spec.HealthCheckNodePort); hc != 0 {
		if ps, seen := protos[hc]; !seen || slices.Contains(ps, corev1.ProtocolTCP) {
			out = append(out, hc)
		}
	}
	return out
}

// Repairer checks allocators against the live Services and, in Repair,
// brings them in line, as kube-apiserver's ClusterIP and node port repair
// controllers do. It keeps per-value leak counters between passes, so use
// one Repairer per set of allocators.
type Repairer struct {
	a *Allocators
	// LeakPasses is how many consecutive passes must see a value leaked
	// before Repair frees it; values below 1 mean DefaultLeakPasses.
	LeakPasses int

	ipLeaks   map[netip.Addr]int
	portLeaks map[int]int
}

// NewRepairer returns a Repairer for a with LeakPasses = DefaultLeakPasses.
func NewRepairer(a *Allocators) *Repairer {
	return &Repairer{a: a, LeakPasses: DefaultLeakPasses, ipLeaks: map[netip.Addr]int{}, portLeaks: map[int]int{}}
}

// Check compares the allocators with services and reports every problem
// without changing anything (leak counters included).
func (r *Repairer) Check(services []*corev1.Service) Report {
	return r.pass(services, false)
}

// Repair runs one pass: it reports as Check does, marks Missing values,
// counts Leaked ones and frees those seen leaked on LeakPasses consecutive
// passes. Duplicates, out-of-range and invalid values are only reported:
// fixing them means changing a Service ("please recreate").
func (r *Repairer) Repair(services []*corev1.Service) Report {
	return r.pass(services, true)
}

type claim struct {
	svcs []string
}

// repairPass is one pass of a Repairer: the services' claims, then the problems
// with them, per resource.
type repairPass struct {
	r          *Repairer
	fix        bool
	threshold  int // consecutive passes a value must be leaked before it is freed
	rep        Report
	ipClaims   map[netip.Addr]*claim
	portClaims map[int]*claim
}

func (r *Repairer) pass(services []*corev1.Service, fix bool) Report {
	if r.ipLeaks == nil {
		r.ipLeaks = map[netip.Addr]int{}
	}
	if r.portLeaks == nil {
		r.portLeaks = map[int]int{}
	}
	threshold := r.LeakPasses
	if threshold < 1 {
		threshold = DefaultLeakPasses
	}
	p := &repairPass{r: r, fix: fix, threshold: threshold, ipClaims: map[netip.Addr]*claim{}, portClaims: map[int]*claim{}}
	svcs := slices.Clone(services)
	slices.SortStableFunc(svcs, func(x, y *corev1.Service) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})
	for _, svc := range svcs {
		key := svc.Namespace + "/" + svc.Name
		p.claimClusterIPs(svc, key)
		p.claimNodePorts(svc, key)
	}
	seenIPLeaks := p.checkClusterIPs()
	seenPortLeaks := p.checkNodePorts()
	if fix {
		// Counters track consecutive passes: a value not leaked this pass
		// (used again, or released) starts from zero next time.
		forgetLeaks(r.ipLeaks, seenIPLeaks)
		forgetLeaks(r.portLeaks, seenPortLeaks)
	}
	slices.SortStableFunc(p.rep.Problems, compareProblems)
	return p.rep
}

func (p *repairPass) problem(pr Problem) { p.rep.Problems = append(p.rep.Problems, pr) }

// claimClusterIPs records the service's cluster IPs; an invalid IP, or one that no
// allocator can hand out, is a problem at once.
func (p *repairPass) claimClusterIPs(svc *corev1.Service, key string) {
	for _, raw := range ClusterIPsOf(svc) {
		ip, err := netip.ParseAddr(raw)
		if err != nil || ip.Zone() != "" {
			p.problem(Problem{Kind: Invalid, Resource: ResourceClusterIP, Value: raw, Services: []string{key}})
			continue
		}
		ip = ip.Unmap()
		ipa := p.r.a.ForIP(ip)
		if ipa == nil || !ipa.usable(ip) {
			pr := Problem{Kind: OutOfRange, Resource: ResourceClusterIP, Value: ip.String(), Services: []string{key}}
			if ipa != nil {
				pr.Range = ipa.CIDR().String()
			}
			p.problem(pr)
			continue
		}
		addClaim(p.ipClaims, ip, key)
	}
}

// claimNodePorts records the service's node ports; one out of the range is a problem
// at once.
func (p *repairPass) claimNodePorts(svc *corev1.Service, key string) {
	for _, port := range NodePortsOf(svc) {
		pa := p.r.a.NodePorts
		if pa == nil || !pa.r.Contains(port) {
			pr := Problem{Kind: OutOfRange, Resource: ResourceNodePort, Value: strconv.Itoa(port), Services: []string{key}}
			if pa != nil {
				pr.Range = pa.r.String()
			}
			p.problem(pr)
			continue
		}
		addClaim(p.portClaims, port, key)
	}
}

func addClaim[K comparable](claims map[K]*claim, k K, key string) {
	c := claims[k]
	if c == nil {
		c = &claim{}
		claims[k] = c
	}
	c.svcs = append(c.svcs, key)
}

// checkClusterIPs reports claimed IPs that are duplicates or not allocated (marking
// them when fixing) and allocated IPs nobody claims (counting them, and freeing them
// when fixing). It returns the IPs seen leaked.
func (p *repairPass) checkClusterIPs() map[netip.Addr]bool {
	for ip, c := range p.ipClaims {
		ipa := p.r.a.ForIP(ip)
		if len(c.svcs) > 1 {
			p.problem(Problem{Kind: Duplicate, Resource: ResourceClusterIP, Value: ip.String(), Services: c.svcs, Range: ipa.CIDR().String()})
		}
		if !ipa.Has(ip) {
			pr := Problem{Kind: Missing, Resource: ResourceClusterIP, Value: ip.String(), Services: c.svcs, Range: ipa.CIDR().String()}
			if p.fix {
				pr.Fixed = ipa.Allocate(ip) == nil
			}
			p.problem(pr)
		}
	}
	seen := map[netip.Addr]bool{}
	for _, ipa := range p.r.a.ClusterIPs {
		ipa.ForEach(func(ip netip.Addr) {
			if p.ipClaims[ip] != nil {
				return
			}
			pr := Problem{Kind: Leaked, Resource: ResourceClusterIP, Value: ip.String(), Range: ipa.CIDR().String()}
			if p.fix {
				seen[ip] = true
				pr.LeakCount, pr.Fixed = countLeak(p.r.ipLeaks, ip, p.threshold, ipa.Release)
			}
			p.problem(pr)
		})
	}
	return seen
}

// checkNodePorts is checkClusterIPs for node ports.
func (p *repairPass) checkNodePorts() map[int]bool {
	pa := p.r.a.NodePorts
	for port, c := range p.portClaims {
		if len(c.svcs) > 1 {
			p.problem(Problem{Kind: Duplicate, Resource: ResourceNodePort, Value: strconv.Itoa(port), Services: c.svcs, Range: pa.r.String()})
		}
		if !pa.Has(port) {
			pr := Problem{Kind: Missing, Resource: ResourceNodePort, Value: strconv.Itoa(port), Services: c.svcs, Range: pa.r.String()}
			if p.fix {
				pr.Fixed = pa.Allocate(port) == nil
			}
			p.problem(pr)
		}
	}
	seen := map[int]bool{}
	if pa != nil {
		pa.ForEach(func(port int) {
			if p.portClaims[port] != nil {
				return
			}
			pr := Problem{Kind: Leaked, Resource: ResourceNodePort, Value: strconv.Itoa(port), Range: pa.r.String()}
			if p.fix {
				seen[port] = true
				pr.LeakCount, pr.Fixed = countLeak(p.r.portLeaks, port, p.threshold, pa.Release)
			}
			p.problem(pr)
		})
	}
	return seen
}

// countLeak counts one more pass that saw k leaked. On the threshold-th it releases k
// and forgets it.
func countLeak[K comparable](leaks map[K]int, k K, threshold int, release func(K)) (count int, freed bool) {
	count = leaks[k] + 1
	if count >= threshold {
		release(k)
		delete(leaks, k)
		return count, true
	}
	leaks[k] = count
	return count, false
}

// forgetLeaks drops the counters of the values not seen leaked in this pass.
func forgetLeaks[K comparable](leaks map[K]int, seen map[K]bool) {
	for k := range leaks {
		if !seen[k] {
			delete(leaks, k)
		}
	}
}

var kindOrder = map[ProblemKind]int{Invalid: 0, OutOfRange: 1, Duplicate: 2, Missing: 3, Leaked: 4}

func compareProblems(x, y Problem) int {
	if c := cmp.Compare(x.Resource, y.Resource); c != 0 {
		return c // "ClusterIP" < "NodePort"
	}
	if c := compareValues(x, y); c != 0 {
		return c
	}
	if c := cmp.Compare(kindOrder[x.Kind], kindOrder[y.Kind]); c != 0 {
		return c
	}
	return slices.Compare(x.Services, y.Services)
}

func compareValues(x, y Problem) int {
	if x.Resource == ResourceNodePort {
		a, _ := strconv.Atoi(x.Value)
		b, _ := strconv.Atoi(y.Value)
		return cmp.Compare(a, b)
	}
	a, errA := netip.ParseAddr(x.Value)
	b, errB := netip.ParseAddr(y.Value)
	switch {
	case errA != nil && errB != nil:
		return cmp.Compare(x.Value, y.Value)
	case errA != nil:
		return -1 // invalid values first
	case errB != nil:
		return 1
	}
	return a.Compare(b)
}

// usable reports whether ip is one of the allocator's usable addresses.
func (a *IPAllocator) usable(ip netip.Addr) bool {
	_, ok := a.offset(ip)
	return ok
}
