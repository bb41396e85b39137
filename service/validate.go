package service

import (
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// This file restates kube-apiserver's validation for the kinds clusterlab
// models (kubernetes pkg/apis/core/validation and pkg/apis/discovery/validation):
// the same rules, field paths and messages, so a field.ErrorList prints as a
// real cluster's 422 does.

var (
	supportedPortProtocols   = sets.New(corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)
	supportedSessionAffinity = sets.New(corev1.ServiceAffinityClientIP, corev1.ServiceAffinityNone)
	supportedServiceTypes    = sets.New(corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort,
		corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName)
	supportedInternalTrafficPolicies = sets.New(corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal)
	supportedExternalTrafficPolicies = sets.New(corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal)
	supportedIPFamilies              = sets.New(corev1.IPv4Protocol, corev1.IPv6Protocol)
	supportedIPFamilyPolicies        = sets.New(corev1.IPFamilyPolicySingleStack,
		corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack)
	supportedTrafficDistributions = []string{corev1.ServiceTrafficDistributionPreferClose,
		corev1.ServiceTrafficDistributionPreferSameZone, corev1.ServiceTrafficDistributionPreferSameNode}
	supportedAddressTypes = sets.New(discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN)
	supportedDNSPolicies  = sets.New(corev1.DNSClusterFirstWithHostNet, corev1.DNSClusterFirst, corev1.DNSDefault, corev1.DNSNone)
	supportedRestart      = sets.New(corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever)
	supportedIPModes      = sets.New(corev1.LoadBalancerIPModeVIP, corev1.LoadBalancerIPModeProxy)
)

// Validate checks a (defaulted) object as the API server does on create and
// returns every problem, each with its field path, e.g.
//
//	spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive
//
// Turn the list into the API server's 422 error with InvalidError.
func Validate(obj runtime.Object) field.ErrorList {
	switch o := obj.(type) {
	case *corev1.Service:
		return ValidateService(o)
	case *corev1.Pod:
		return ValidatePod(o)
	case *corev1.Node:
		return ValidateNode(o)
	case *corev1.Namespace:
		return ValidateNamespace(o)
	case *corev1.Endpoints:
		return ValidateEndpoints(o)
	case *discoveryv1.EndpointSlice:
		return ValidateEndpointSlice(o)
	case *networkingv1.NetworkPolicy:
		return ValidateNetworkPolicy(o)
	}
	return field.ErrorList{field.InternalError(nil, fmt.Errorf("clusterlab does not handle %T", obj))}
}

// ValidateUpdate checks an update of old to obj (both defaulted, same kind):
// the create rules plus immutability rules.
func ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	meta, oldMeta := objectMeta(obj), objectMeta(old)
	if meta == nil || oldMeta == nil || reflect.TypeOf(obj) != reflect.TypeOf(old) {
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("cannot update %T with %T", old, obj))}
	}
	allErrs := apivalidation.ValidateObjectMetaUpdate(meta, oldMeta, field.NewPath("metadata"))
	switch o := obj.(type) {
	case *corev1.Service:
		return append(allErrs, validateServiceUpdate(o, old.(*corev1.Service))...)
	case *corev1.Pod:
		allErrs = append(allErrs, validatePodSpecUpdate(o, old.(*corev1.Pod))...)
	case *discoveryv1.EndpointSlice:
		allErrs = append(allErrs, apivalidation.ValidateImmutableField(o.AddressType, old.(*discoveryv1.EndpointSlice).AddressType, field.NewPath("addressType"))...)
	}
	return append(allErrs, Validate(obj)...)
}

// InvalidError wraps a field.ErrorList as the API server's 422 error:
//
//	Service "web" is invalid: [spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive, ...]
//
// apierrors.IsInvalid reports true for it; nil for an empty list.
func InvalidError(obj runtime.Object, el field.ErrorList) error {
	if len(el) == 0 {
		return nil
	}
	name := ""
	if m := objectMeta(obj); m != nil {
		name = m.Name
	}
	return apierrors.NewInvalid(kinds[KindOf(obj)].gvk.GroupKind(), name, el)
}

// --- helpers shared with upstream --------------------------------------

func validateDNS1123Label(value string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(value) {
		errs = append(errs, field.Invalid(p, value, msg))
	}
	return errs
}

func validateDNS1123Subdomain(value string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(value) {
		errs = append(errs, field.Invalid(p, value, msg))
	}
	return errs
}

func validateQualifiedName(value string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(value) {
		errs = append(errs, field.Invalid(p, value, msg))
	}
	return errs
}

func validatePortNumOrName(port intstr.IntOrString, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch port.Type {
	case intstr.Int:
		for _, msg := range validation.IsValidPortNum(port.IntValue()) {
			errs = append(errs, field.Invalid(p, port.IntValue(), msg))
		}
	case intstr.String:
		for _, msg := range validation.IsValidPortName(port.StrVal) {
			errs = append(errs, field.Invalid(p, port.StrVal, msg))
		}
	default:
		errs = append(errs, field.InternalError(p, fmt.Errorf("unknown type: %v", port.Type)))
	}
	return errs
}

// validateLegacyIP checks an address in one of the API's "legacy" IP
// fields (clusterIPs, externalIPs, Endpoints and EndpointSlice addresses,
// pod and host IPs, load-balancer ingress IPs) as the API server does with
// strict IP validation (KEP-4858, StrictIPCIDRValidation): it must parse,
// IPv4 octets may not have leading zeros and IPv4-mapped IPv6 addresses are
// refused, but an IPv6 address need not be in canonical form (such as
// "FD00:0::5") — the API server only warns about that.
func validateLegacyIP(p *field.Path, value string) field.ErrorList {
	return validation.IsValidIPForLegacyField(p, value, true, nil)
}

// validateLegacyCIDR is validateLegacyIP for the legacy CIDR fields
// (loadBalancerSourceRanges, node podCIDRs): no leading zeros, not
// IPv4-mapped, no bits set past the prefix length, any IPv6 spelling.
func validateLegacyCIDR(p *field.Path, value string) field.ErrorList {
	return validation.IsValidCIDRForLegacyField(p, value, true, nil)
}

// ValidateNonSpecialIP rejects addresses that make no sense as endpoints or
// external IPs: unspecified, loopback, link-local unicast and link-local
// multicast.
func ValidateNonSpecialIP(ipAddress string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	ip := net.ParseIP(ipAddress)
	if ip == nil {
		return append(errs, field.Invalid(p, ipAddress, "must be a valid IP address"))
	}
	if ip.IsUnspecified() {
		errs = append(errs, field.Invalid(p, ipAddress, fmt.Sprintf("may not be unspecified (%v)", ipAddress)))
	}
	if ip.IsLoopback() {
		errs = append(errs, field.Invalid(p, ipAddress, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
	}
	if ip.IsLinkLocalUnicast() {
		errs = append(errs, field.Invalid(p, ipAddress, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
	}
	if ip.IsLinkLocalMulticast() {
		errs = append(errs, field.Invalid(p, ipAddress, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
	}
	return errs
}

// servicePortKey is printed (as JSON) in "Duplicate value" messages for a
// repeated (protocol, port) pair; its fields are those of the API server's
// internal core.ServicePort so the message reads the same.
type servicePortKey struct {
	Name        string
	Protocol    corev1.Protocol
	AppProtocol *string
	Port        int32
	TargetPort  intstr.IntOrString
	NodePort    int32
}

func isIPv6String(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6() && !a.Is4In6()
}

// --- Service -------------------------------------------------------------

// ValidateService restates ValidateService from kube-apiserver: each step below is
// one part of it, and the errors come in the API server's order.
func ValidateService(svc *corev1.Service) field.ErrorList {
	metaPath := field.NewPath("metadata")
	allErrs := apivalidation.ValidateObjectMeta(&svc.ObjectMeta, true, apivalidation.NameIsDNS1035Label, metaPath)
	for _, step := range []func(*corev1.Service) field.ErrorList{
		validateTopologyAnnotations,
		validateServiceTypeFields,
		validateServicePorts,
		validateServiceSelector,
		validateSessionAffinity,
		ValidateServiceClusterIPsRelatedFields,
		validateExternalIPs,
		validateServiceType,
		validateNodePorts,
		validateDuplicatePorts,
		validateLoadBalancerSourceRanges,
		validateAllocateLoadBalancerNodePorts,
		func(svc *corev1.Service) field.ErrorList { return validateLoadBalancerClass(nil, svc) },
		validateExternalTrafficPolicy,
		validateInternalTrafficPolicy,
		validateTrafficDistribution,
	} {
		allErrs = append(allErrs, step(svc)...)
	}
	return allErrs
}

// validateTopologyAnnotations: the topology-mode annotation and the deprecated
// topology-aware-hints one must agree when both are set.
func validateTopologyAnnotations(svc *corev1.Service) field.ErrorList {
	hintsVal, hintsSet := svc.Annotations[corev1.DeprecatedAnnotationTopologyAwareHints]
	modeVal, modeSet := svc.Annotations[corev1.AnnotationTopologyMode]
	if modeSet && hintsSet && modeVal != hintsVal {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "annotations").Key(corev1.AnnotationTopologyMode), modeVal,
			fmt.Sprintf("must match annotations[%s] when both are specified", corev1.DeprecatedAnnotationTopologyAwareHints))}
	}
	return nil
}

// validateServiceTypeFields checks what each type requires or forbids: ports (but for
// headless and ExternalName services), no headless NodePort or LoadBalancer, and an
// ExternalName service's name and absent IP fields.
func validateServiceTypeFields(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	specPath := field.NewPath("spec")
	headless := isHeadlessIPs(svc)
	if len(svc.Spec.Ports) == 0 && !headless && svc.Spec.Type != corev1.ServiceTypeExternalName {
		allErrs = append(allErrs, field.Required(specPath.Child("ports"), ""))
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer:
		if headless {
			allErrs = append(allErrs, field.Invalid(specPath.Child("clusterIPs").Index(0), svc.Spec.ClusterIPs[0], "may not be set to 'None' for LoadBalancer services"))
		}
	case corev1.ServiceTypeNodePort:
		if headless {
			allErrs = append(allErrs, field.Invalid(specPath.Child("clusterIPs").Index(0), svc.Spec.ClusterIPs[0], "may not be set to 'None' for NodePort services"))
		}
	case corev1.ServiceTypeExternalName:
		if len(svc.Spec.ClusterIPs) > 0 {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("clusterIPs"), "may not be set for ExternalName services"))
		}
		if len(svc.Spec.IPFamilies) > 0 {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("ipFamilies"), "may not be set for ExternalName services"))
		}
		if svc.Spec.IPFamilyPolicy != nil {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("ipFamilyPolicy"), "may not be set for ExternalName services"))
		}
		// The value (a CNAME) may have a trailing dot to denote it as fully qualified.
		cname := strings.TrimSuffix(svc.Spec.ExternalName, ".")
		if len(cname) > 0 {
			allErrs = append(allErrs, validateDNS1123Subdomain(cname, specPath.Child("externalName"))...)
		} else {
			allErrs = append(allErrs, field.Required(specPath.Child("externalName"), ""))
		}
	}
	return allErrs
}

// validateServicePorts checks each port; names must be unique when there are several.
func validateServicePorts(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	portNames := sets.Set[string]{}
	portsPath := field.NewPath("spec", "ports")
	for i := range svc.Spec.Ports {
		allErrs = append(allErrs, validateServicePort(&svc.Spec.Ports[i], len(svc.Spec.Ports) > 1, portNames, portsPath.Index(i))...)
	}
	return allErrs
}

func validateServiceSelector(svc *corev1.Service) field.ErrorList {
	if svc.Spec.Selector == nil {
		return nil
	}
	return metav1validation.ValidateLabels(svc.Spec.Selector, field.NewPath("spec", "selector"))
}

// validateSessionAffinity checks sessionAffinity and that its config goes with it.
func validateSessionAffinity(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	specPath := field.NewPath("spec")
	if len(svc.Spec.SessionAffinity) == 0 {
		allErrs = append(allErrs, field.Required(specPath.Child("sessionAffinity"), ""))
	} else if !supportedSessionAffinity.Has(svc.Spec.SessionAffinity) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("sessionAffinity"), svc.Spec.SessionAffinity, sets.List(supportedSessionAffinity)))
	}
	switch svc.Spec.SessionAffinity {
	case corev1.ServiceAffinityClientIP:
		allErrs = append(allErrs, validateClientIPAffinityConfig(svc.Spec.SessionAffinityConfig, specPath.Child("sessionAffinityConfig"))...)
	case corev1.ServiceAffinityNone:
		if svc.Spec.SessionAffinityConfig != nil {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("sessionAffinityConfig"), fmt.Sprintf("must not be set when session affinity is %s", corev1.ServiceAffinityNone)))
		}
	}
	return allErrs
}

// validateExternalIPs: each external IP must be a valid, non-special address.
func validateExternalIPs(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	ipPath := field.NewPath("spec", "externalIPs")
	for i, ip := range svc.Spec.ExternalIPs {
		idx := ipPath.Index(i)
		if errs := validateLegacyIP(idx, ip); len(errs) != 0 {
			allErrs = append(allErrs, errs...)
		} else {
			allErrs = append(allErrs, ValidateNonSpecialIP(ip, idx)...)
		}
	}
	return allErrs
}

func validateServiceType(svc *corev1.Service) field.ErrorList {
	p := field.NewPath("spec", "type")
	if len(svc.Spec.Type) == 0 {
		return field.ErrorList{field.Required(p, "")}
	} else if !supportedServiceTypes.Has(svc.Spec.Type) {
		return field.ErrorList{field.NotSupported(p, svc.Spec.Type, sets.List(supportedServiceTypes))}
	}
	return nil
}

// validateNodePorts: a ClusterIP service has no node ports, and no two ports share a
// node port over the same protocol.
func validateNodePorts(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	portsPath := field.NewPath("spec", "ports")
	if svc.Spec.Type == corev1.ServiceTypeClusterIP {
		for i := range svc.Spec.Ports {
			if svc.Spec.Ports[i].NodePort != 0 {
				allErrs = append(allErrs, field.Forbidden(portsPath.Index(i).Child("nodePort"), "may not be used when `type` is 'ClusterIP'"))
			}
		}
	}
	// Duplicate node ports, considering (protocol, nodePort) pairs.
	nodePorts := map[servicePortKey]bool{}
	for i, p := range svc.Spec.Ports {
		if p.NodePort == 0 {
			continue
		}
		// A port number, as the API server's registry checks (IsValidPortNum)
		// before allocating it.
		for _, msg := range validation.IsValidPortNum(int(p.NodePort)) {
			allErrs = append(allErrs, field.Invalid(portsPath.Index(i).Child("nodePort"), p.NodePort, msg))
		}
		k := servicePortKey{Protocol: p.Protocol, NodePort: p.NodePort}
		if nodePorts[k] {
			allErrs = append(allErrs, field.Duplicate(portsPath.Index(i).Child("nodePort"), p.NodePort))
		}
		nodePorts[k] = true
	}
	return allErrs
}

// validateDuplicatePorts: no two ports share a port number over the same protocol.
func validateDuplicatePorts(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	portsPath := field.NewPath("spec", "ports")
	ports := map[servicePortKey]bool{}
	for i, p := range svc.Spec.Ports {
		k := servicePortKey{Protocol: p.Protocol, Port: p.Port}
		if ports[k] {
			allErrs = append(allErrs, field.Duplicate(portsPath.Index(i), k))
		}
		ports[k] = true
	}
	return allErrs
}

// validateLoadBalancerSourceRanges checks spec.loadBalancerSourceRanges or, when it is
// empty, the annotation that predates it: LoadBalancer services only, CIDRs.
func validateLoadBalancerSourceRanges(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	if len(svc.Spec.LoadBalancerSourceRanges) > 0 {
		// The API server spells this path with a capital L.
		fp := field.NewPath("spec").Child("LoadBalancerSourceRanges")
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			allErrs = append(allErrs, field.Forbidden(fp, "may only be used when `type` is 'LoadBalancer'"))
		}
		for i, v := range svc.Spec.LoadBalancerSourceRanges {
			// Space padding is tolerated, for historical reasons.
			allErrs = append(allErrs, validateLegacyCIDR(fp.Index(i), strings.TrimSpace(v))...)
		}
	} else if val, ok := svc.Annotations[corev1.AnnotationLoadBalancerSourceRangesKey]; ok {
		fp := field.NewPath("metadata", "annotations").Key(corev1.AnnotationLoadBalancerSourceRangesKey)
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			allErrs = append(allErrs, field.Forbidden(fp, "may only be used when `type` is 'LoadBalancer'"))
		}
		if val = strings.TrimSpace(val); val != "" {
			for _, v := range strings.Split(val, ",") {
				allErrs = append(allErrs, validateLegacyCIDR(fp, strings.TrimSpace(v))...)
			}
		}
	}
	return allErrs
}

// validateAllocateLoadBalancerNodePorts: set for LoadBalancer services, and only them.
func validateAllocateLoadBalancerNodePorts(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	if svc.Spec.AllocateLoadBalancerNodePorts != nil && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "allocateLoadBalancerNodePorts"), "may only be used when `type` is 'LoadBalancer'"))
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.AllocateLoadBalancerNodePorts == nil {
		// The API server reports this without the "spec." prefix.
		allErrs = append(allErrs, field.Required(field.NewPath("allocateLoadBalancerNodePorts"), ""))
	}
	return allErrs
}

// validateInternalTrafficPolicy: required for the types that have cluster IPs.
func validateInternalTrafficPolicy(svc *corev1.Service) field.ErrorList {
	p := field.NewPath("spec", "internalTrafficPolicy")
	if svc.Spec.InternalTrafficPolicy == nil {
		switch svc.Spec.Type {
		case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
			return field.ErrorList{field.Required(p, "")}
		}
	} else if !supportedInternalTrafficPolicies.Has(*svc.Spec.InternalTrafficPolicy) {
		return field.ErrorList{field.NotSupported(p, *svc.Spec.InternalTrafficPolicy, sets.List(supportedInternalTrafficPolicies))}
	}
	return nil
}

func validateTrafficDistribution(svc *corev1.Service) field.ErrorList {
	if td := svc.Spec.TrafficDistribution; td != nil && !sets.New(supportedTrafficDistributions...).Has(*td) {
		return field.ErrorList{field.NotSupported(field.NewPath("spec", "trafficDistribution"), *td, supportedTrafficDistributions)}
	}
	return nil
}

// isHeadlessIPs is the validation's notion of headless: clusterIPs == ["None"].
func isHeadlessIPs(svc *corev1.Service) bool {
	return len(svc.Spec.ClusterIPs) == 1 && svc.Spec.ClusterIPs[0] == corev1.ClusterIPNone
}

func validateServicePort(sp *corev1.ServicePort, requireName bool, names sets.Set[string], p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if requireName && len(sp.Name) == 0 {
		allErrs = append(allErrs, field.Required(p.Child("name"), ""))
	} else if len(sp.Name) != 0 {
		allErrs = append(allErrs, validateDNS1123Label(sp.Name, p.Child("name"))...)
		if names.Has(sp.Name) {
			allErrs = append(allErrs, field.Duplicate(p.Child("name"), sp.Name))
		} else {
			names.Insert(sp.Name)
		}
	}
	for _, msg := range validation.IsValidPortNum(int(sp.Port)) {
		allErrs = append(allErrs, field.Invalid(p.Child("port"), sp.Port, msg))
	}
	if len(sp.Protocol) == 0 {
		allErrs = append(allErrs, field.Required(p.Child("protocol"), ""))
	} else if !supportedPortProtocols.Has(sp.Protocol) {
		allErrs = append(allErrs, field.NotSupported(p.Child("protocol"), sp.Protocol, sets.List(supportedPortProtocols)))
	}
	allErrs = append(allErrs, validatePortNumOrName(sp.TargetPort, p.Child("targetPort"))...)
	if sp.AppProtocol != nil {
		allErrs = append(allErrs, validateQualifiedName(*sp.AppProtocol, p.Child("appProtocol"))...)
	}
	return allErrs
}

func validateClientIPAffinityConfig(cfg *corev1.SessionAffinityConfig, p *field.Path) field.ErrorList {
	msg := fmt.Sprintf("when session affinity type is %s", corev1.ServiceAffinityClientIP)
	switch {
	case cfg == nil:
		return field.ErrorList{field.Required(p, msg)}
	case cfg.ClientIP == nil:
		return field.ErrorList{field.Required(p.Child("clientIP"), msg)}
	case cfg.ClientIP.TimeoutSeconds == nil:
		return field.ErrorList{field.Required(p.Child("clientIP", "timeoutSeconds"), msg)}
	}
	if t := *cfg.ClientIP.TimeoutSeconds; t <= 0 || t > MaxClientIPAffinitySeconds {
		return field.ErrorList{field.Invalid(p.Child("clientIP", "timeoutSeconds"), t,
			fmt.Sprintf("must be greater than 0 and less than %d", MaxClientIPAffinitySeconds))}
	}
	return nil
}

func validateExternalTrafficPolicy(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	p := field.NewPath("spec")
	if !ExternallyAccessible(svc) {
		if svc.Spec.ExternalTrafficPolicy != "" {
			allErrs = append(allErrs, field.Invalid(p.Child("externalTrafficPolicy"), svc.Spec.ExternalTrafficPolicy,
				"may only be set for externally-accessible services"))
		}
	} else if svc.Spec.ExternalTrafficPolicy == "" {
		allErrs = append(allErrs, field.Required(p.Child("externalTrafficPolicy"), ""))
	} else if !supportedExternalTrafficPolicies.Has(svc.Spec.ExternalTrafficPolicy) {
		allErrs = append(allErrs, field.NotSupported(p.Child("externalTrafficPolicy"), svc.Spec.ExternalTrafficPolicy, sets.List(supportedExternalTrafficPolicies)))
	}
	if !NeedsHealthCheck(svc) {
		if svc.Spec.HealthCheckNodePort != 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("healthCheckNodePort"), svc.Spec.HealthCheckNodePort,
				"may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
		}
	} else if svc.Spec.HealthCheckNodePort == 0 {
		allErrs = append(allErrs, field.Required(p.Child("healthCheckNodePort"), ""))
	} else {
		for _, msg := range validation.IsValidPortNum(int(svc.Spec.HealthCheckNodePort)) {
			allErrs = append(allErrs, field.Invalid(p.Child("healthCheckNodePort"), svc.Spec.HealthCheckNodePort, msg))
		}
	}
	return allErrs
}

func validateLoadBalancerClass(old, svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	p := field.NewPath("spec", "loadBalancerClass")
	isLB := func(s *corev1.Service) bool { return s.Spec.Type == corev1.ServiceTypeLoadBalancer }
	if old != nil && isLB(old) && isLB(svc) && !equalStringPtr(old.Spec.LoadBalancerClass, svc.Spec.LoadBalancerClass) {
		allErrs = append(allErrs, field.Invalid(p, svc.Spec.LoadBalancerClass, "may not change once set"))
	}
	if isLB(svc) {
		if svc.Spec.LoadBalancerClass != nil {
			allErrs = append(allErrs, validateQualifiedName(*svc.Spec.LoadBalancerClass, p)...)
		}
	} else if svc.Spec.LoadBalancerClass != nil {
		allErrs = append(allErrs, field.Forbidden(p, "may only be used when `type` is 'LoadBalancer'"))
	}
	return allErrs
}

func equalStringPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// ValidateServiceClusterIPsRelatedFields checks clusterIP, clusterIPs,
// ipFamilies and ipFamilyPolicy against each other. The Store also runs it
// before allocating, as the registry does.
func ValidateServiceClusterIPsRelatedFields(svc *corev1.Service) field.ErrorList {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil // checked (all must be unset) by ValidateService
	}
	var allErrs field.ErrorList
	specPath := field.NewPath("spec")
	ipsPath := specPath.Child("clusterIPs")
	famPath := specPath.Child("ipFamilies")

	if len(svc.Spec.ClusterIP) != 0 {
		if len(svc.Spec.ClusterIPs) == 0 {
			allErrs = append(allErrs, field.Required(ipsPath, ""))
		} else if svc.Spec.ClusterIPs[0] != svc.Spec.ClusterIP {
			allErrs = append(allErrs, field.Invalid(ipsPath, svc.Spec.ClusterIPs, "first value must match `clusterIP`"))
		}
	} else if len(svc.Spec.ClusterIPs) != 0 {
		allErrs = append(allErrs, field.Invalid(ipsPath, svc.Spec.ClusterIPs, "must be empty when `clusterIP` is not specified"))
	}

	seen := sets.Set[corev1.IPFamily]{}
	for i, fam := range svc.Spec.IPFamilies {
		if !supportedIPFamilies.Has(fam) {
			allErrs = append(allErrs, field.NotSupported(famPath.Index(i), fam, sets.List(supportedIPFamilies)))
		}
		if seen.Has(fam) {
			allErrs = append(allErrs, field.Duplicate(famPath.Index(i), fam))
		}
		seen.Insert(fam)
	}
	if svc.Spec.IPFamilyPolicy != nil && !supportedIPFamilyPolicies.Has(*svc.Spec.IPFamilyPolicy) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("ipFamilyPolicy"), svc.Spec.IPFamilyPolicy, sets.List(supportedIPFamilyPolicies)))
	}

	hasInvalidIPs := false
	for i, ip := range svc.Spec.ClusterIPs {
		if i == 0 && ip == corev1.ClusterIPNone {
			if len(svc.Spec.ClusterIPs) > 1 {
				hasInvalidIPs = true
				allErrs = append(allErrs, field.Invalid(ipsPath, svc.Spec.ClusterIPs, "'None' must be the first and only value"))
			}
			continue
		}
		errs := validateLegacyIP(ipsPath.Index(i), ip)
		hasInvalidIPs = hasInvalidIPs || len(errs) != 0
		allErrs = append(allErrs, errs...)
	}
	if len(svc.Spec.ClusterIPs) > 2 {
		allErrs = append(allErrs, field.Invalid(ipsPath, svc.Spec.ClusterIPs, "may only hold up to 2 values"))
	}
	// Past an invalid IP or a misplaced None the remaining checks would only
	// produce confusing follow-up errors.
	if hasInvalidIPs {
		return allErrs
	}
	if len(svc.Spec.ClusterIPs) > 1 {
		v6 := 0
		for _, ip := range svc.Spec.ClusterIPs {
			if isIPv6String(ip) {
				v6++
			}
		}
		if len(svc.Spec.ClusterIPs) != 2 || v6 != 1 {
			allErrs = append(allErrs, field.Invalid(ipsPath, svc.Spec.ClusterIPs, "may specify no more than one IP for each IP family"))
		}
	}
	if !isHeadlessIPs(svc) && len(svc.Spec.ClusterIPs) > 0 && len(svc.Spec.IPFamilies) > 0 {
		for i, ip := range svc.Spec.ClusterIPs {
			if i >= len(svc.Spec.IPFamilies) {
				break
			}
			if svc.Spec.IPFamilies[i] == corev1.IPv4Protocol && isIPv6String(ip) {
				allErrs = append(allErrs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("expected an IPv4 value as indicated by `ipFamilies[%v]`", i)))
			}
			if svc.Spec.IPFamilies[i] == corev1.IPv6Protocol && !isIPv6String(ip) {
				allErrs = append(allErrs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("expected an IPv6 value as indicated by `ipFamilies[%v]`", i)))
			}
		}
	}
	return allErrs
}

func validateServiceUpdate(svc, old *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateUpgradeDowngradeClusterIPs(old, svc)...)
	allErrs = append(allErrs, validateUpgradeDowngradeIPFamilies(old, svc)...)
	allErrs = append(allErrs, validateLoadBalancerClass(old, svc)...)
	if NeedsHealthCheck(old) && NeedsHealthCheck(svc) && svc.Spec.HealthCheckNodePort != old.Spec.HealthCheckNodePort {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "healthCheckNodePort"), "field is immutable"))
	}
	return append(allErrs, ValidateService(svc)...)
}

func validateUpgradeDowngradeClusterIPs(old, svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	if svc.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	if isHeadlessIPs(old) && isHeadlessIPs(svc) {
		return nil
	}
	p := field.NewPath("spec", "clusterIPs")
	oldIPs, newIPs := old.Spec.ClusterIPs, svc.Spec.ClusterIPs
	switch {
	case len(oldIPs) == len(newIPs):
		for i, ip := range oldIPs {
			if ip != newIPs[i] {
				allErrs = append(allErrs, field.Invalid(p.Index(i), newIPs, "may not change once set"))
			}
		}
	case len(oldIPs) > len(newIPs):
		if len(newIPs) == 0 {
			allErrs = append(allErrs, field.Invalid(p.Index(0), newIPs, "primary clusterIP can not be unset"))
		}
		if len(oldIPs) > 0 && len(newIPs) > 0 && newIPs[0] != oldIPs[0] {
			allErrs = append(allErrs, field.Invalid(p.Index(0), newIPs, "may not change once set"))
		}
		if len(newIPs) == 1 && (svc.Spec.IPFamilyPolicy == nil || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack) {
			allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "ipFamilyPolicy"), svc.Spec.IPFamilyPolicy, "must be set to 'SingleStack' when releasing the secondary clusterIP"))
		}
	default:
		if len(oldIPs) > 0 && newIPs[0] != oldIPs[0] {
			allErrs = append(allErrs, field.Invalid(p.Index(0), newIPs, "may not change once set"))
		}
	}
	return allErrs
}

func validateUpgradeDowngradeIPFamilies(old, svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	if svc.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	if isHeadlessIPs(old) || isHeadlessIPs(svc) {
		return nil // headless services may change families; so may services becoming or leaving headless
	}
	p := field.NewPath("spec", "ipFamilies")
	oldF, newF := old.Spec.IPFamilies, svc.Spec.IPFamilies
	switch {
	case len(oldF) == len(newF):
		for i := range oldF {
			if oldF[i] != newF[i] {
				allErrs = append(allErrs, field.Invalid(p.Index(0), newF, "may not change once set"))
			}
		}
	case len(oldF) > len(newF):
		if len(svc.Spec.ClusterIPs) == 0 {
			allErrs = append(allErrs, field.Invalid(p.Index(0), newF, "primary ipFamily can not be unset"))
		}
		if len(newF) > 0 && newF[0] != oldF[0] {
			allErrs = append(allErrs, field.Invalid(p.Index(0), svc.Spec.ClusterIPs, "may not change once set"))
		}
		if len(newF) == 1 && (svc.Spec.IPFamilyPolicy == nil || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack) {
			allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "ipFamilyPolicy"), svc.Spec.IPFamilyPolicy, "must be set to 'SingleStack' when releasing the secondary ipFamily"))
		}
	default:
		if len(oldF) > 0 && len(newF) > 0 && newF[0] != oldF[0] {
			allErrs = append(allErrs, field.Invalid(p.Index(0), svc.Spec.ClusterIPs, "may not change once set"))
		}
	}
	return allErrs
}

// ValidateServiceStatus checks status.loadBalancer as the API server does on
// a status update.
func ValidateServiceStatus(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	p := field.NewPath("status", "loadBalancer", "ingress")
	for i, ing := range svc.Status.LoadBalancer.Ingress {
		idx := p.Index(i)
		if ing.IP != "" {
			allErrs = append(allErrs, validateLegacyIP(idx.Child("ip"), ing.IP)...)
		}
		switch {
		case ing.IPMode != nil && ing.IP == "":
			allErrs = append(allErrs, field.Forbidden(idx.Child("ipMode"), "may not be specified when `ip` is not"))
		case ing.IPMode == nil && ing.IP != "":
			allErrs = append(allErrs, field.Required(idx.Child("ipMode"), "must be specified when `ip` is set"))
		case ing.IPMode != nil && !supportedIPModes.Has(*ing.IPMode):
			allErrs = append(allErrs, field.NotSupported(idx.Child("ipMode"), *ing.IPMode, sets.List(supportedIPModes)))
		}
		if ing.Hostname != "" {
			allErrs = append(allErrs, validateDNS1123Subdomain(ing.Hostname, idx.Child("hostname"))...)
			if net.ParseIP(ing.Hostname) != nil {
				allErrs = append(allErrs, field.Invalid(idx.Child("hostname"), ing.Hostname, "must be a DNS name, not an IP address"))
			}
		}
	}
	return allErrs
}

// --- Pod -----------------------------------------------------------------

// ValidatePod checks the parts of a Pod that service networking uses:
// metadata, containers (names, images, ports), hostname and subdomain, DNS
// and restart policy, node name, and status IPs. (The API server checks much
// more: volumes, resources, security contexts ... which clusterlab ignores.)
func ValidatePod(pod *corev1.Pod) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&pod.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	if len(pod.Spec.Containers) == 0 {
		allErrs = append(allErrs, field.Required(spec.Child("containers"), ""))
	}
	names := sets.Set[string]{}
	for _, cs := range []struct {
		field string
		list  []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i := range cs.list {
			allErrs = append(allErrs, validateContainer(&cs.list[i], names, spec.Child(cs.field).Index(i))...)
		}
	}
	if pod.Spec.Hostname != "" {
		allErrs = append(allErrs, validateDNS1123Label(pod.Spec.Hostname, spec.Child("hostname"))...)
	}
	if pod.Spec.Subdomain != "" {
		allErrs = append(allErrs, validateDNS1123Label(pod.Spec.Subdomain, spec.Child("subdomain"))...)
	}
	if pod.Spec.NodeName != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(pod.Spec.NodeName, false) {
			allErrs = append(allErrs, field.Invalid(spec.Child("nodeName"), pod.Spec.NodeName, msg))
		}
	}
	switch {
	case pod.Spec.DNSPolicy == "":
		allErrs = append(allErrs, field.Required(spec.Child("dnsPolicy"), ""))
	case !supportedDNSPolicies.Has(pod.Spec.DNSPolicy):
		allErrs = append(allErrs, field.NotSupported(spec.Child("dnsPolicy"), pod.Spec.DNSPolicy, sets.List(supportedDNSPolicies)))
	case pod.Spec.DNSPolicy == corev1.DNSNone && pod.Spec.DNSConfig == nil:
		allErrs = append(allErrs, field.Required(spec.Child("dnsConfig"), fmt.Sprintf("must provide `dnsConfig` when `dnsPolicy` is %s", corev1.DNSNone)))
	}
	switch {
	case pod.Spec.RestartPolicy == "":
		allErrs = append(allErrs, field.Required(spec.Child("restartPolicy"), ""))
	case !supportedRestart.Has(pod.Spec.RestartPolicy):
		allErrs = append(allErrs, field.NotSupported(spec.Child("restartPolicy"), pod.Spec.RestartPolicy, sets.List(supportedRestart)))
	}
	return append(allErrs, ValidatePodStatus(pod)...)
}

func validateContainer(c *corev1.Container, names sets.Set[string], p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if c.Name == "" {
		allErrs = append(allErrs, field.Required(p.Child("name"), ""))
	} else {
		allErrs = append(allErrs, validateDNS1123Label(c.Name, p.Child("name"))...)
		if names.Has(c.Name) {
			allErrs = append(allErrs, field.Duplicate(p.Child("name"), c.Name))
		}
		names.Insert(c.Name)
	}
	if c.Image == "" {
		allErrs = append(allErrs, field.Required(p.Child("image"), ""))
	}
	portNames := sets.Set[string]{}
	for i, port := range c.Ports {
		idx := p.Child("ports").Index(i)
		if port.Name != "" {
			for _, msg := range validation.IsValidPortName(port.Name) {
				allErrs = append(allErrs, field.Invalid(idx.Child("name"), port.Name, msg))
			}
			if portNames.Has(port.Name) {
				allErrs = append(allErrs, field.Duplicate(idx.Child("name"), port.Name))
			}
			portNames.Insert(port.Name)
		}
		if port.ContainerPort == 0 {
			allErrs = append(allErrs, field.Required(idx.Child("containerPort"), ""))
		} else {
			for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
				allErrs = append(allErrs, field.Invalid(idx.Child("containerPort"), port.ContainerPort, msg))
			}
		}
		if port.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
				allErrs = append(allErrs, field.Invalid(idx.Child("hostPort"), port.HostPort, msg))
			}
		}
		if port.Protocol == "" {
			allErrs = append(allErrs, field.Required(idx.Child("protocol"), ""))
		} else if !supportedPortProtocols.Has(port.Protocol) {
			allErrs = append(allErrs, field.NotSupported(idx.Child("protocol"), port.Protocol, sets.List(supportedPortProtocols)))
		}
	}
	return append(allErrs, validateProbes(c, p)...)
}

// validateProbes checks a container's probes as the API server does: one handler each,
// no negative numbers, a successThreshold of 1 for liveness and startup probes, valid
// ports; init containers have probes only as sidecars (restartPolicy Always).
func validateProbes(c *corev1.Container, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	init := strings.Contains(p.String(), "initContainers")
	sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	for _, pr := range []struct {
		name     string
		probe    *corev1.Probe
		successs bool // successThreshold must be 1
	}{{"startupProbe", c.StartupProbe, true}, {"readinessProbe", c.ReadinessProbe, false}, {"livenessProbe", c.LivenessProbe, true}} {
		if pr.probe == nil {
			continue
		}
		fp := p.Child(pr.name)
		if init && !sidecar {
			allErrs = append(allErrs, field.Forbidden(fp, "may not be set for init containers without restartPolicy=Always"))
			continue
		}
		allErrs = append(allErrs, validateProbe(pr.probe, fp)...)
		if pr.successs && pr.probe.SuccessThreshold > 1 {
			allErrs = append(allErrs, field.Invalid(fp.Child("successThreshold"), pr.probe.SuccessThreshold, "must be 1"))
		}
	}
	return allErrs
}

func validateProbe(pb *corev1.Probe, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, f := range []struct {
		name string
		v    int32
	}{{"initialDelaySeconds", pb.InitialDelaySeconds}, {"timeoutSeconds", pb.TimeoutSeconds}, {"periodSeconds", pb.PeriodSeconds}, {"successThreshold", pb.SuccessThreshold}, {"failureThreshold", pb.FailureThreshold}} {
		if f.v < 0 {
			allErrs = append(allErrs, field.Invalid(p.Child(f.name), f.v, "must be greater than or equal to 0"))
		}
	}
	handlers := 0
	if pb.Exec != nil {
		handlers++
	}
	if pb.HTTPGet != nil {
		handlers++
		allErrs = append(allErrs, validateProbePort(pb.HTTPGet.Port, p.Child("httpGet", "port"))...)
	}
	if pb.TCPSocket != nil {
		handlers++
		allErrs = append(allErrs, validateProbePort(pb.TCPSocket.Port, p.Child("tcpSocket", "port"))...)
	}
	if pb.GRPC != nil {
		handlers++
		for _, msg := range validation.IsValidPortNum(int(pb.GRPC.Port)) {
			allErrs = append(allErrs, field.Invalid(p.Child("grpc", "port"), pb.GRPC.Port, msg))
		}
	}
	switch {
	case handlers == 0:
		allErrs = append(allErrs, field.Required(p, "must specify a handler type"))
	case handlers > 1:
		allErrs = append(allErrs, field.Forbidden(p, "may not specify more than 1 handler type"))
	}
	return allErrs
}

func validateProbePort(port intstr.IntOrString, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if port.Type == intstr.String {
		for _, msg := range validation.IsValidPortName(port.StrVal) {
			allErrs = append(allErrs, field.Invalid(p, port.StrVal, msg))
		}
		return allErrs
	}
	for _, msg := range validation.IsValidPortNum(port.IntValue()) {
		allErrs = append(allErrs, field.Invalid(p, port.IntValue(), msg))
	}
	return allErrs
}

// ValidatePodStatus checks status.podIP(s) and status.hostIP(s): valid
// addresses, at most two, one per family.
func ValidatePodStatus(pod *corev1.Pod) field.ErrorList {
	var allErrs field.ErrorList
	status := field.NewPath("status")
	var podIPs, hostIPs []string
	for _, ip := range pod.Status.PodIPs {
		podIPs = append(podIPs, ip.IP)
	}
	for _, ip := range pod.Status.HostIPs {
		hostIPs = append(hostIPs, ip.IP)
	}
	allErrs = append(allErrs, validateIPPair(podIPs, status.Child("podIPs"))...)
	allErrs = append(allErrs, validateIPPair(hostIPs, status.Child("hostIPs"))...)
	return allErrs
}

func validateIPPair(ips []string, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(ips) > 2 {
		return append(allErrs, field.TooMany(p, len(ips), 2))
	}
	for i, ip := range ips {
		allErrs = append(allErrs, validateLegacyIP(p.Index(i).Child("ip"), ip)...)
	}
	if len(allErrs) == 0 && len(ips) == 2 && isIPv6String(ips[0]) == isIPv6String(ips[1]) {
		allErrs = append(allErrs, field.Invalid(p, ips, "may specify no more than one IP for each IP family"))
	}
	return allErrs
}

// validatePodSpecUpdate allows, like the API server, changes to container
// images, activeDeadlineSeconds and added tolerations; clusterlab also allows
// setting spec.nodeName when it was empty (what a binding does).
func validatePodSpecUpdate(pod, old *corev1.Pod) field.ErrorList {
	mungedOld := old.Spec.DeepCopy()
	for i := range mungedOld.Containers {
		if i < len(pod.Spec.Containers) {
			mungedOld.Containers[i].Image = pod.Spec.Containers[i].Image
		}
	}
	for i := range mungedOld.InitContainers {
		if i < len(pod.Spec.InitContainers) {
			mungedOld.InitContainers[i].Image = pod.Spec.InitContainers[i].Image
		}
	}
	mungedOld.ActiveDeadlineSeconds = pod.Spec.ActiveDeadlineSeconds
	if len(pod.Spec.Tolerations) >= len(mungedOld.Tolerations) &&
		apiequality.Semantic.DeepEqual(pod.Spec.Tolerations[:len(mungedOld.Tolerations)], mungedOld.Tolerations) {
		mungedOld.Tolerations = pod.Spec.Tolerations
	}
	if mungedOld.NodeName == "" {
		mungedOld.NodeName = pod.Spec.NodeName
	}
	if !apiequality.Semantic.DeepEqual(*mungedOld, pod.Spec) {
		return field.ErrorList{field.Forbidden(field.NewPath("spec"),
			"pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.nodeName` (only when unset)")}
	}
	return nil
}

// --- Node, Namespace -----------------------------------------------------

// ValidateNode checks a Node's name and pod CIDRs.
func ValidateNode(node *corev1.Node) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&node.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	p := field.NewPath("spec", "podCIDRs")
	if len(node.Spec.PodCIDRs) > 2 {
		allErrs = append(allErrs, field.TooMany(p, len(node.Spec.PodCIDRs), 2))
	}
	for i, c := range node.Spec.PodCIDRs {
		allErrs = append(allErrs, validateLegacyCIDR(p.Index(i), c)...)
	}
	if node.Spec.PodCIDR != "" && len(node.Spec.PodCIDRs) > 0 && node.Spec.PodCIDR != node.Spec.PodCIDRs[0] {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "podCIDR"), node.Spec.PodCIDR, "must match the first element of podCIDRs"))
	}
	return allErrs
}

// ValidateNamespace checks a Namespace's name.
func ValidateNamespace(ns *corev1.Namespace) field.ErrorList {
	return apivalidation.ValidateObjectMeta(&ns.ObjectMeta, false, apivalidation.NameIsDNSLabel, field.NewPath("metadata"))
}

// --- Endpoints, EndpointSlice ----------------------------------------------

// ValidateEndpoints restates ValidateEndpoints: each subset needs addresses
// or notReadyAddresses; addresses are valid, non-special IPs; ports follow
// the service-port rules.
func ValidateEndpoints(ep *corev1.Endpoints) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&ep.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	p := field.NewPath("subsets")
	for i := range ep.Subsets {
		ss := &ep.Subsets[i]
		idx := p.Index(i)
		if len(ss.Addresses) == 0 && len(ss.NotReadyAddresses) == 0 {
			allErrs = append(allErrs, field.Required(idx, "must specify `addresses` or `notReadyAddresses`"))
		}
		for a := range ss.Addresses {
			allErrs = append(allErrs, validateEndpointAddress(&ss.Addresses[a], idx.Child("addresses").Index(a))...)
		}
		for a := range ss.NotReadyAddresses {
			allErrs = append(allErrs, validateEndpointAddress(&ss.NotReadyAddresses[a], idx.Child("notReadyAddresses").Index(a))...)
		}
		for j := range ss.Ports {
			allErrs = append(allErrs, validateEndpointPort(&ss.Ports[j], len(ss.Ports) > 1, idx.Child("ports").Index(j))...)
		}
	}
	return allErrs
}

func validateEndpointAddress(a *corev1.EndpointAddress, p *field.Path) field.ErrorList {
	allErrs := validateLegacyIP(p.Child("ip"), a.IP)
	if len(allErrs) == 0 {
		allErrs = ValidateNonSpecialIP(a.IP, p.Child("ip"))
	}
	if len(a.Hostname) > 0 {
		allErrs = append(allErrs, validateDNS1123Label(a.Hostname, p.Child("hostname"))...)
	}
	if a.NodeName != nil {
		for _, msg := range apivalidation.NameIsDNSSubdomain(*a.NodeName, false) {
			allErrs = append(allErrs, field.Invalid(p.Child("nodeName"), *a.NodeName, msg))
		}
	}
	return allErrs
}

func validateEndpointPort(port *corev1.EndpointPort, requireName bool, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if requireName && len(port.Name) == 0 {
		allErrs = append(allErrs, field.Required(p.Child("name"), ""))
	} else if len(port.Name) != 0 {
		allErrs = append(allErrs, validateDNS1123Label(port.Name, p.Child("name"))...)
	}
	for _, msg := range validation.IsValidPortNum(int(port.Port)) {
		allErrs = append(allErrs, field.Invalid(p.Child("port"), port.Port, msg))
	}
	if len(port.Protocol) == 0 {
		allErrs = append(allErrs, field.Required(p.Child("protocol"), ""))
	} else if !supportedPortProtocols.Has(port.Protocol) {
		allErrs = append(allErrs, field.NotSupported(p.Child("protocol"), port.Protocol, sets.List(supportedPortProtocols)))
	}
	if port.AppProtocol != nil {
		allErrs = append(allErrs, validateQualifiedName(*port.AppProtocol, p.Child("appProtocol"))...)
	}
	return allErrs
}

const (
	maxSliceEndpoints = 1000
	maxSliceAddresses = 100
	maxSlicePorts     = 100
	maxTopologyLabels = 16
)

// ValidateEndpointSlice restates the discovery API's validation: address
// type, per-endpoint addresses (valid, of the slice's family, non-special),
// hostnames, topology labels, and ports.
func ValidateEndpointSlice(s *discoveryv1.EndpointSlice) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&s.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	atPath := field.NewPath("addressType")
	if s.AddressType == "" {
		allErrs = append(allErrs, field.Required(atPath, ""))
	} else if !supportedAddressTypes.Has(s.AddressType) {
		allErrs = append(allErrs, field.NotSupported(atPath, s.AddressType, sets.List(supportedAddressTypes)))
	}

	ep := field.NewPath("endpoints")
	if len(s.Endpoints) > maxSliceEndpoints {
		allErrs = append(allErrs, field.TooMany(ep, len(s.Endpoints), maxSliceEndpoints))
	} else {
		for i, e := range s.Endpoints {
			idx := ep.Index(i)
			ap := idx.Child("addresses")
			if len(e.Addresses) == 0 {
				allErrs = append(allErrs, field.Required(ap, "must contain at least 1 address"))
			} else if len(e.Addresses) > maxSliceAddresses {
				allErrs = append(allErrs, field.TooMany(ap, len(e.Addresses), maxSliceAddresses))
			}
			for j, addr := range e.Addresses {
				allErrs = append(allErrs, validateSliceAddress(s.AddressType, addr, ap.Index(j))...)
			}
			tp := idx.Child("deprecatedTopology")
			if len(e.DeprecatedTopology) > maxTopologyLabels {
				allErrs = append(allErrs, field.TooMany(tp, len(e.DeprecatedTopology), maxTopologyLabels))
			}
			allErrs = append(allErrs, metav1validation.ValidateLabels(e.DeprecatedTopology, tp)...)
			if e.Hostname != nil {
				allErrs = append(allErrs, validateDNS1123Label(*e.Hostname, idx.Child("hostname"))...)
			}
			if e.NodeName != nil {
				for _, msg := range apivalidation.NameIsDNSSubdomain(*e.NodeName, false) {
					allErrs = append(allErrs, field.Invalid(idx.Child("nodeName"), *e.NodeName, msg))
				}
			}
		}
	}

	pp := field.NewPath("ports")
	if len(s.Ports) > maxSlicePorts {
		return append(allErrs, field.TooMany(pp, len(s.Ports), maxSlicePorts))
	}
	names := sets.Set[string]{}
	for i, port := range s.Ports {
		idx := pp.Index(i)
		name := ""
		if port.Name != nil {
			name = *port.Name
		}
		if len(name) > 0 {
			allErrs = append(allErrs, validateDNS1123Label(name, idx.Child("name"))...)
		}
		if names.Has(name) {
			allErrs = append(allErrs, field.Duplicate(idx.Child("name"), name))
		} else {
			names.Insert(name)
		}
		if port.Protocol == nil {
			allErrs = append(allErrs, field.Required(idx.Child("protocol"), ""))
		} else if !supportedPortProtocols.Has(*port.Protocol) {
			allErrs = append(allErrs, field.NotSupported(idx.Child("protocol"), *port.Protocol, sets.List(supportedPortProtocols)))
		}
		if port.Port != nil {
			for _, msg := range validation.IsValidPortNum(int(*port.Port)) {
				allErrs = append(allErrs, field.Invalid(idx.Child("port"), *port.Port, msg))
			}
		}
		if port.AppProtocol != nil {
			allErrs = append(allErrs, validateQualifiedName(*port.AppProtocol, idx.Child("appProtocol"))...)
		}
	}
	return allErrs
}

func validateSliceAddress(at discoveryv1.AddressType, addr string, p *field.Path) field.ErrorList {
	switch at {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
		errs := validateLegacyIP(p, addr)
		if len(errs) > 0 {
			return errs
		}
		if v6 := isIPv6String(addr); v6 != (at == discoveryv1.AddressTypeIPv6) {
			return field.ErrorList{field.Invalid(p, addr, fmt.Sprintf("must be an %s address", at))}
		}
		return ValidateNonSpecialIP(addr, p)
	case discoveryv1.AddressTypeFQDN:
		return validation.IsFullyQualifiedDomainName(p, addr)
	}
	return nil
}
