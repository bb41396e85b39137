package service

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/clusterlab/clusterlab/alloc"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// This file is the service registry's allocation logic (kubernetes
// pkg/registry/core/service/storage: alloc.go, storage.go and the
// strategy's PrepareForUpdate), restated over package alloc.
//
// Create:  normalizeClusterIPs → initIPFamilyFields → clusterIPs → nodePorts
//          → healthCheckNodePort   (before validation, as in BeginCreate)
// Update:  patchAllocatedValues → normalizeClusterIPs → initIPFamilyFields →
//          clusterIP changes → nodePort changes → healthCheckNodePort changes
//          → dropTypeDependentFields
// All in one alloc.Tx: allocations happen at once, releases at Commit, and
// Revert undoes a failed request.

// APIServerPort is the target port of the default/kubernetes service.
const APIServerPort = 6443

var serviceGK = corev1.SchemeGroupVersion.WithKind(KindService).GroupKind()

func invalidService(svc *corev1.Service, el field.ErrorList) error {
	return apierrors.NewInvalid(serviceGK, svc.Name, el)
}

func needsClusterIP(svc *corev1.Service) bool { return svc.Spec.Type != corev1.ServiceTypeExternalName }

func needsNodePort(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
}

func shouldAllocateNodePorts(svc *corev1.Service) bool {
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		return true
	case corev1.ServiceTypeLoadBalancer:
		return svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts
	}
	return false
}

func familyOf(ip string) corev1.IPFamily {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "unknown"
	}
	return alloc.FamilyOf(a)
}

func otherFamily(f corev1.IPFamily) corev1.IPFamily {
	if f == corev1.IPv4Protocol {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

func policyOf(svc *corev1.Service) corev1.IPFamilyPolicy {
	if svc.Spec.IPFamilyPolicy == nil {
		return ""
	}
	return *svc.Spec.IPFamilyPolicy
}

// normalizeClusterIPs keeps clusterIP and clusterIPs in step (old is nil on create).
func normalizeClusterIPs(svc, old *corev1.Service) {
	if old == nil {
		if svc.Spec.ClusterIP != "" && len(svc.Spec.ClusterIPs) == 0 {
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
		return
	}
	// An old client cleared clusterIPs while patching something else.
	if len(old.Spec.ClusterIPs) > 0 && len(svc.Spec.ClusterIPs) == 0 && old.Spec.ClusterIP == svc.Spec.ClusterIP {
		svc.Spec.ClusterIPs = old.Spec.ClusterIPs
	}
	if old.Spec.ClusterIP != svc.Spec.ClusterIP {
		if old.Spec.ClusterIP != "" && svc.Spec.ClusterIP == "" {
			if slices.Equal(old.Spec.ClusterIPs, svc.Spec.ClusterIPs) {
				svc.Spec.ClusterIPs = nil
			}
		} else if slices.Equal(old.Spec.ClusterIPs, svc.Spec.ClusterIPs) {
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
	}
}

// patchAllocatedValues lets a client re-submit the YAML it created the
// service from: values the registry allocated are carried over.
func patchAllocatedValues(svc, old *corev1.Service) {
	if needsClusterIP(old) && needsClusterIP(svc) {
		if svc.Spec.ClusterIP == "" {
			svc.Spec.ClusterIP = old.Spec.ClusterIP
		}
		if len(svc.Spec.ClusterIPs) == 0 && len(old.Spec.ClusterIPs) > 0 {
			svc.Spec.ClusterIPs = slices.Clone(old.Spec.ClusterIPs)
		}
	}
	if needsNodePort(old) && needsNodePort(svc) {
		used := map[int32]bool{}
		newUsed := map[int32]bool{}
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				newUsed[p.NodePort] = true
			}
		}
		for _, p := range old.Spec.Ports {
			if p.NodePort != 0 && newUsed[p.NodePort] {
				used[p.NodePort] = true
			}
		}
		byName := map[string]int32{}
		for _, p := range old.Spec.Ports {
			byName[p.Name] = p.NodePort
		}
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			if p.NodePort == 0 {
				if v := byName[p.Name]; !used[v] {
					p.NodePort = v
				}
			}
		}
	}
	if NeedsHealthCheck(old) && NeedsHealthCheck(svc) && svc.Spec.HealthCheckNodePort == 0 {
		svc.Spec.HealthCheckNodePort = old.Spec.HealthCheckNodePort
	}
}

// isMatchingPreferDualStack reports an update of a PreferDualStack service
// that leaves its IPs and families as they were: nothing to re-derive.
func isMatchingPreferDualStack(svc, old *corev1.Service) bool {
	if old == nil || svc.Spec.IPFamilyPolicy == nil || old.Spec.Type != svc.Spec.Type {
		return false
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	default:
		return false
	}
	if policyOf(svc) != corev1.IPFamilyPolicyPreferDualStack || (old.Spec.IPFamilyPolicy != nil && policyOf(old) != corev1.IPFamilyPolicyPreferDualStack) {
		return false
	}
	return svc.Spec.ClusterIP == old.Spec.ClusterIP && slices.Equal(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) &&
		slices.Equal(svc.Spec.IPFamilies, old.Spec.IPFamilies)
}

// initIPFamilyFields defaults ipFamilyPolicy and ipFamilies for the cluster
// and checks that what is asked for is configured.
func (s *Store) initIPFamilyFields(svc, old *corev1.Service) error {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	if isMatchingPreferDualStack(svc, old) {
		return nil
	}
	if svc.Spec.IPFamilyPolicy == nil {
		var p corev1.IPFamilyPolicy
		switch {
		case old != nil && old.Spec.IPFamilyPolicy != nil:
			p = *old.Spec.IPFamilyPolicy
		case svc.Spec.ClusterIP == corev1.ClusterIPNone && len(svc.Spec.Selector) == 0:
			p = corev1.IPFamilyPolicyRequireDualStack // headless + selectorless
		default:
			p = corev1.IPFamilyPolicySingleStack
		}
		svc.Spec.IPFamilyPolicy = &p
	}
	if el := ValidateServiceClusterIPsRelatedFields(svc); len(el) != 0 {
		return invalidService(svc, el)
	}

	var el field.ErrorList
	policyPath := field.NewPath("spec", "ipFamilyPolicy")
	if old != nil {
		if policyOf(svc) == corev1.IPFamilyPolicySingleStack {
			if slices.Equal(old.Spec.ClusterIPs, svc.Spec.ClusterIPs) && len(svc.Spec.ClusterIPs) > 1 {
				svc.Spec.ClusterIPs = svc.Spec.ClusterIPs[:1]
			}
			if slices.Equal(old.Spec.IPFamilies, svc.Spec.IPFamilies) && len(svc.Spec.IPFamilies) > 1 {
				svc.Spec.IPFamilies = svc.Spec.IPFamilies[:1]
			}
		} else {
			if len(svc.Spec.ClusterIPs) > 0 && len(svc.Spec.ClusterIPs) < len(old.Spec.ClusterIPs) {
				el = append(el, field.Invalid(policyPath, svc.Spec.IPFamilyPolicy, "must be 'SingleStack' to release the secondary cluster IP"))
			}
			if len(svc.Spec.IPFamilies) > 0 && len(svc.Spec.IPFamilies) < len(old.Spec.IPFamilies) {
				el = append(el, field.Invalid(policyPath, svc.Spec.IPFamilyPolicy, "must be 'SingleStack' to release the secondary IP family"))
			}
		}
	}
	if policyOf(svc) == corev1.IPFamilyPolicySingleStack {
		if len(svc.Spec.ClusterIPs) == 2 {
			el = append(el, field.Invalid(policyPath, svc.Spec.IPFamilyPolicy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"))
		}
		if len(svc.Spec.IPFamilies) == 2 {
			el = append(el, field.Invalid(policyPath, svc.Spec.IPFamilyPolicy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"))
		}
	}
	// Families follow the given IPs.
	for i, ip := range svc.Spec.ClusterIPs {
		if ip == corev1.ClusterIPNone {
			break
		}
		fam := familyOf(ip)
		if i >= len(svc.Spec.IPFamilies) {
			if s.allocs.ForFamily(fam) == nil {
				el = append(el, field.Invalid(field.NewPath("spec", "clusterIPs").Index(i), svc.Spec.ClusterIPs, fmt.Sprintf("%s is not configured on this cluster", fam)))
			} else {
				svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, fam)
			}
		}
	}
	if len(el) > 0 {
		return invalidService(svc, el)
	}

	primary := s.allocs.PrimaryFamily()
	if svc.Spec.ClusterIP == corev1.ClusterIPNone && len(svc.Spec.Selector) == 0 {
		// Headless and selectorless: any families, even on a single-stack cluster.
		if len(svc.Spec.IPFamilies) == 0 {
			svc.Spec.IPFamilies = []corev1.IPFamily{primary}
		}
		if len(svc.Spec.IPFamilies) < 2 && policyOf(svc) != corev1.IPFamilyPolicySingleStack {
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, otherFamily(svc.Spec.IPFamilies[0]))
		}
		return nil
	}
	if policyOf(svc) == corev1.IPFamilyPolicyRequireDualStack && !s.allocs.DualStack() {
		el = append(el, field.Invalid(policyPath, svc.Spec.IPFamilyPolicy, "this cluster is not configured for dual-stack services"))
	}
	for i, fam := range svc.Spec.IPFamilies {
		if s.allocs.ForFamily(fam) == nil {
			el = append(el, field.Invalid(field.NewPath("spec", "ipFamilies").Index(i), fam, "not configured on this cluster"))
		}
	}
	if len(el) > 0 {
		return invalidService(svc, el)
	}
	if len(svc.Spec.IPFamilies) == 0 {
		svc.Spec.IPFamilies = []corev1.IPFamily{primary}
	}
	if policyOf(svc) != corev1.IPFamilyPolicySingleStack && len(svc.Spec.IPFamilies) == 1 && s.allocs.DualStack() {
		svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, otherFamily(svc.Spec.IPFamilies[0]))
	}
	return nil
}

// allocIP allocates clusterIPs[i] for family fam ("" means any free IP).
func allocIP(tx *alloc.Tx, svc *corev1.Service, i int, fam corev1.IPFamily) error {
	ip := svc.Spec.ClusterIPs[i]
	if ip == "" {
		a, err := tx.AllocateNextIP(fam)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("failed to allocate a serviceIP: %v", err))
		}
		svc.Spec.ClusterIPs[i] = a.String()
		return nil
	}
	a, err := netip.ParseAddr(ip)
	if err == nil {
		err = tx.AllocateIP(a)
	}
	if err != nil {
		return invalidService(svc, field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs"), svc.Spec.ClusterIPs,
			fmt.Sprintf("failed to allocate IP %v: %v", ip, err))})
	}
	return nil
}

func allocClusterIPs(tx *alloc.Tx, svc *corev1.Service) error {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || isHeadlessIPs(svc) {
		return nil
	}
	if svc.Spec.ClusterIPs == nil {
		svc.Spec.ClusterIPs = make([]string, 0, len(svc.Spec.IPFamilies))
	}
	for i := range svc.Spec.IPFamilies {
		if i >= len(svc.Spec.ClusterIPs) {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, "")
		}
	}
	for i, fam := range svc.Spec.IPFamilies {
		if err := allocIP(tx, svc, i, fam); err != nil {
			return err
		}
	}
	if len(svc.Spec.ClusterIPs) > 0 {
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	}
	return nil
}

func findRequestedNodePort(port int32, ports []corev1.ServicePort) int32 {
	for _, p := range ports {
		if p.Port == port && p.NodePort != 0 {
			return p.NodePort
		}
	}
	return 0
}

// initNodePorts gives each port a node port; ports sharing a port number
// (53/TCP and 53/UDP) share one.
func initNodePorts(tx *alloc.Tx, svc *corev1.Service) error {
	byPort := map[int32]int32{}
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		if sp.NodePort == 0 && !shouldAllocateNodePorts(svc) {
			continue // only explicit requests
		}
		path := field.NewPath("spec", "ports").Index(i).Child("nodePort")
		allocated := byPort[sp.Port]
		switch {
		case allocated == 0:
			if np := findRequestedNodePort(sp.Port, svc.Spec.Ports); np != 0 {
				if err := tx.AllocatePort(int(np)); err != nil {
					return invalidService(svc, field.ErrorList{field.Invalid(path, np, err.Error())})
				}
				sp.NodePort = np
			} else {
				np, err := tx.AllocateNextPort()
				if err != nil {
					return apierrors.NewInternalError(fmt.Errorf("failed to allocate a nodePort: %v", err))
				}
				sp.NodePort = int32(np)
			}
			byPort[sp.Port] = sp.NodePort
		case sp.NodePort == 0:
			sp.NodePort = allocated
		case sp.NodePort != allocated:
			if err := tx.AllocatePort(int(sp.NodePort)); err != nil {
				return invalidService(svc, field.ErrorList{field.Invalid(path, sp.NodePort, err.Error())})
			}
		}
	}
	return nil
}

func allocHealthCheckNodePort(tx *alloc.Tx, svc *corev1.Service) error {
	if hc := svc.Spec.HealthCheckNodePort; hc != 0 {
		if err := tx.AllocatePort(int(hc)); err != nil {
			return apierrors.NewInternalError(fmt.Errorf("failed to allocate requested HealthCheck NodePort %v: %v", hc, err))
		}
		return nil
	}
	np, err := tx.AllocateNextPort()
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("failed to allocate a HealthCheck NodePort %v: %v", np, err))
	}
	svc.Spec.HealthCheckNodePort = int32(np)
	return nil
}

// allocateCreate runs the registry's BeginCreate allocation. On success the
// caller commits (or reverts) the returned transaction.
func (s *Store) allocateCreate(svc *corev1.Service) (*alloc.Tx, error) {
	normalizeClusterIPs(svc, nil)
	if err := s.initIPFamilyFields(svc, nil); err != nil {
		return nil, err
	}
	tx := s.allocs.Begin()
	err := allocClusterIPs(tx, svc)
	if err == nil && needsNodePort(svc) {
		err = initNodePorts(tx, svc)
	}
	if err == nil && NeedsHealthCheck(svc) {
		err = allocHealthCheckNodePort(tx, svc)
	}
	if err != nil {
		tx.Revert()
		return nil, err
	}
	return tx, nil
}

func collectNodePorts(svc *corev1.Service) []int32 {
	var out []int32
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			out = append(out, p.NodePort)
		}
	}
	return out
}

// allocateUpdate runs the registry's BeginUpdate and the strategy's
// PrepareForUpdate.
func (s *Store) allocateUpdate(svc, old *corev1.Service) (*alloc.Tx, error) {
	patchAllocatedValues(svc, old)
	normalizeClusterIPs(svc, old)
	if err := s.initIPFamilyFields(svc, old); err != nil {
		return nil, err
	}
	tx := s.allocs.Begin()
	fail := func(err error) (*alloc.Tx, error) {
		tx.Revert()
		return nil, err
	}
	if err := updateClusterIPs(tx, svc, old); err != nil {
		return fail(err)
	}
	if needsNodePort(old) && !needsNodePort(svc) {
		for _, np := range collectNodePorts(old) {
			tx.ReleasePort(int(np))
		}
	}
	if needsNodePort(svc) {
		if err := updateNodePorts(tx, svc, old); err != nil {
			return fail(err)
		}
	}
	switch {
	case !NeedsHealthCheck(old) && NeedsHealthCheck(svc):
		if err := allocHealthCheckNodePort(tx, svc); err != nil {
			return fail(err)
		}
	case NeedsHealthCheck(old) && !NeedsHealthCheck(svc):
		tx.ReleasePort(int(old.Spec.HealthCheckNodePort))
	}
	dropTypeDependentFields(svc, old)
	return tx, nil
}

func updateClusterIPs(tx *alloc.Tx, svc, old *corev1.Service) error {
	if isMatchingPreferDualStack(svc, old) {
		return nil
	}
	// ExternalName → a type with cluster IPs: allocate them all.
	if old.Spec.Type == corev1.ServiceTypeExternalName && svc.Spec.Type != corev1.ServiceTypeExternalName {
		return allocClusterIPs(tx, svc)
	}
	if isHeadlessIPs(old) {
		return nil
	}
	// → ExternalName: release everything.
	if old.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.Type == corev1.ServiceTypeExternalName {
		for _, ip := range old.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				tx.ReleaseIP(a)
			}
		}
		return nil
	}
	switch {
	case len(old.Spec.IPFamilies) == 1 && len(svc.Spec.IPFamilies) == 2: // upgrade to dual-stack
		if len(svc.Spec.ClusterIPs) < 2 {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, "")
		}
		return allocIP(tx, svc, 1, svc.Spec.IPFamilies[1])
	case len(old.Spec.IPFamilies) == 2 && len(svc.Spec.IPFamilies) == 1: // downgrade
		if len(old.Spec.ClusterIPs) > 1 {
			if a, err := netip.ParseAddr(old.Spec.ClusterIPs[1]); err == nil {
				tx.ReleaseIP(a)
			}
		}
	}
	return nil
}

func updateNodePorts(tx *alloc.Tx, svc, old *corev1.Service) error {
	oldPorts := collectNodePorts(old)
	type protoPort struct {
		proto corev1.Protocol
		port  int32
	}
	var seen []protoPort
	taken := map[int32]bool{}
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		if sp.NodePort == 0 && !shouldAllocateNodePorts(svc) {
			continue
		}
		if sp.NodePort != 0 {
			if !slices.Contains(oldPorts, sp.NodePort) && !taken[sp.NodePort] {
				if err := tx.AllocatePort(int(sp.NodePort)); err != nil {
					return invalidService(svc, field.ErrorList{field.Invalid(field.NewPath("spec", "ports").Index(i).Child("nodePort"), sp.NodePort, err.Error())})
				}
				taken[sp.NodePort] = true
			}
		} else {
			np, err := tx.AllocateNextPort()
			if err != nil {
				return apierrors.NewInternalError(fmt.Errorf("failed to allocate a nodePort: %v", err))
			}
			sp.NodePort = int32(np)
		}
		pp := protoPort{sp.Protocol, sp.NodePort}
		if slices.Contains(seen, pp) {
			return apierrors.NewInternalError(fmt.Errorf("duplicate nodePort: {%s %d}", pp.proto, pp.port))
		}
		seen = append(seen, pp)
	}
	newPorts := collectNodePorts(svc)
	for _, np := range oldPorts {
		if !slices.Contains(newPorts, np) {
			tx.ReleasePort(int(np))
		}
	}
	return nil
}

// dropTypeDependentFields clears fields a type change made meaningless,
// when the client did not also change them.
func dropTypeDependentFields(svc, old *corev1.Service) {
	if needsClusterIP(old) && !needsClusterIP(svc) {
		if old.Spec.ClusterIP == svc.Spec.ClusterIP && slices.Equal(old.Spec.ClusterIPs, svc.Spec.ClusterIPs) {
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
		}
		if slices.Equal(old.Spec.IPFamilies, svc.Spec.IPFamilies) {
			svc.Spec.IPFamilies = nil
		}
		if policyOf(old) == policyOf(svc) {
			svc.Spec.IPFamilyPolicy = nil
		}
	}
	if needsNodePort(old) && !needsNodePort(svc) {
		oldPorts := collectNodePorts(old)
		same := true
		for _, np := range collectNodePorts(svc) {
			if !slices.Contains(oldPorts, np) {
				same = false
			}
		}
		if same {
			for i := range svc.Spec.Ports {
				svc.Spec.Ports[i].NodePort = 0
			}
		}
	}
	if NeedsHealthCheck(old) && !NeedsHealthCheck(svc) && old.Spec.HealthCheckNodePort == svc.Spec.HealthCheckNodePort {
		svc.Spec.HealthCheckNodePort = 0
	}
	if old.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		a, b := old.Spec.AllocateLoadBalancerNodePorts, svc.Spec.AllocateLoadBalancerNodePorts
		if a != nil && b != nil && *a == *b {
			svc.Spec.AllocateLoadBalancerNodePorts = nil
		}
		if equalStringPtr(old.Spec.LoadBalancerClass, svc.Spec.LoadBalancerClass) {
			svc.Spec.LoadBalancerClass = nil
		}
	}
	if ExternallyAccessible(old) && !ExternallyAccessible(svc) && old.Spec.ExternalTrafficPolicy == svc.Spec.ExternalTrafficPolicy {
		svc.Spec.ExternalTrafficPolicy = ""
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		svc.Status.LoadBalancer = corev1.LoadBalancerStatus{}
	}
}

// releaseService releases what a deleted service held.
func (s *Store) releaseService(svc *corev1.Service) {
	tx := s.allocs.Begin()
	if needsClusterIP(svc) && !isHeadlessIPs(svc) {
		for _, ip := range svc.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				tx.ReleaseIP(a)
			}
		}
	}
	for _, np := range collectNodePorts(svc) {
		tx.ReleasePort(int(np))
	}
	if NeedsHealthCheck(svc) && svc.Spec.HealthCheckNodePort > 0 {
		tx.ReleasePort(int(svc.Spec.HealthCheckNodePort))
	}
	tx.Commit()
}

// createMasterServiceLocked creates default/kubernetes like the apiserver.
func (s *Store) createMasterServiceLocked() error {
	cidr := s.allocs.ClusterIPs[0].CIDR()
	first := cidr.Masked().Addr().Next()
	svc := NewService("default/kubernetes", Labels("component=apiserver,provider=kubernetes"), ClusterIP(first.String()),
		ServicePort(corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(APIServerPort)}))
	if _, err := s.createLocked(svc); err != nil {
		return err
	}
	addr := s.cfg.APIServerAddress
	if !addr.IsValid() {
		return nil
	}
	ep := NewEndpoints("default/kubernetes", Labels(discoveryv1.LabelSkipMirror+"=true"),
		Subset([]string{addr.String()}, nil, EndpointPort("https", APIServerPort, corev1.ProtocolTCP)))
	if _, err := s.createLocked(ep); err != nil {
		return err
	}
	at := discoveryv1.AddressTypeIPv4
	if addr.Is6() && !addr.Is4In6() {
		at = discoveryv1.AddressTypeIPv6
	}
	sl := NewEndpointSlice("default/kubernetes", ForService("kubernetes"), AddressType(at),
		SlicePort("https", APIServerPort, corev1.ProtocolTCP), Endpoint(discoveryv1.Endpoint{
			Addresses: []string{addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}}))
	_, err := s.createLocked(sl)
	return err
}

func ptrTo[T any](v T) *T { return &v }
