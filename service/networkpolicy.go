package service

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// NetworkPolicy (networking.k8s.io/v1): defaulting as the API server's
// (kubernetes pkg/apis/networking/v1/defaults.go) and validation restating
// pkg/apis/networking/validation's ValidateNetworkPolicy, with its field
// paths and messages.

// DefaultNetworkPolicy sets what the API server's defaulting sets, in place
// (idempotent): a port entry without protocol gets TCP, and an empty
// spec.policyTypes becomes [Ingress], plus Egress when spec.egress has
// rules.
func DefaultNetworkPolicy(np *networkingv1.NetworkPolicy) {
	tcp := corev1.ProtocolTCP
	for i := range np.Spec.Ingress {
		for j := range np.Spec.Ingress[i].Ports {
			if np.Spec.Ingress[i].Ports[j].Protocol == nil {
				np.Spec.Ingress[i].Ports[j].Protocol = &tcp
			}
		}
	}
	for i := range np.Spec.Egress {
		for j := range np.Spec.Egress[i].Ports {
			if np.Spec.Egress[i].Ports[j].Protocol == nil {
				np.Spec.Egress[i].Ports[j].Protocol = &tcp
			}
		}
	}
	if len(np.Spec.PolicyTypes) == 0 {
		types := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(np.Spec.Egress) != 0 {
			types = append(types, networkingv1.PolicyTypeEgress)
		}
		np.Spec.PolicyTypes = types
	}
}

var supportedPolicyTypes = sets.New(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)

// ValidateNetworkPolicy checks a (defaulted) NetworkPolicy as the API server
// does on create: metadata (name a DNS subdomain), label selectors, ports,
// peers and policyTypes.
func ValidateNetworkPolicy(np *networkingv1.NetworkPolicy) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&np.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, validateNetworkPolicySpec(&np.Spec, field.NewPath("spec"))...)
}

func validateNetworkPolicySpec(spec *networkingv1.NetworkPolicySpec, fldPath *field.Path) field.ErrorList {
	opts := metav1validation.LabelSelectorValidationOptions{}
	allErrs := metav1validation.ValidateLabelSelector(&spec.PodSelector, opts, fldPath.Child("podSelector"))
	for i, r := range spec.Ingress {
		p := fldPath.Child("ingress").Index(i)
		for j := range r.Ports {
			allErrs = append(allErrs, validateNetworkPolicyPort(&r.Ports[j], p.Child("ports").Index(j))...)
		}
		for j := range r.From {
			allErrs = append(allErrs, validateNetworkPolicyPeer(&r.From[j], p.Child("from").Index(j))...)
		}
	}
	for i, r := range spec.Egress {
		p := fldPath.Child("egress").Index(i)
		for j := range r.Ports {
			allErrs = append(allErrs, validateNetworkPolicyPort(&r.Ports[j], p.Child("ports").Index(j))...)
		}
		for j := range r.To {
			allErrs = append(allErrs, validateNetworkPolicyPeer(&r.To[j], p.Child("to").Index(j))...)
		}
	}
	if len(spec.PolicyTypes) > supportedPolicyTypes.Len() {
		return append(allErrs, field.Invalid(fldPath.Child("policyTypes"), &spec.PolicyTypes, "may not specify more than two policyTypes"))
	}
	for i, t := range spec.PolicyTypes {
		if !supportedPolicyTypes.Has(t) {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("policyTypes").Index(i), t,
				[]string{string(networkingv1.PolicyTypeIngress), string(networkingv1.PolicyTypeEgress)}))
		}
	}
	return allErrs
}

func validateNetworkPolicyPort(port *networkingv1.NetworkPolicyPort, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if port.Protocol != nil && !supportedPortProtocols.Has(*port.Protocol) {
		allErrs = append(allErrs, field.NotSupported(p.Child("protocol"), *port.Protocol,
			[]string{string(corev1.ProtocolTCP), string(corev1.ProtocolUDP), string(corev1.ProtocolSCTP)}))
	}
	switch {
	case port.Port == nil:
		if port.EndPort != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("endPort"), *port.EndPort, "may not be specified when `port` is not specified"))
		}
	case port.Port.Type == intstr.Int:
		for _, msg := range validation.IsValidPortNum(int(port.Port.IntVal)) {
			allErrs = append(allErrs, field.Invalid(p.Child("port"), port.Port.IntVal, msg))
		}
		if port.EndPort != nil {
			if *port.EndPort < port.Port.IntVal {
				allErrs = append(allErrs, field.Invalid(p.Child("endPort"), *port.EndPort, "must be greater than or equal to `port`"))
			}
			for _, msg := range validation.IsValidPortNum(int(*port.EndPort)) {
				allErrs = append(allErrs, field.Invalid(p.Child("endPort"), *port.EndPort, msg))
			}
		}
	default:
		if port.EndPort != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("endPort"), *port.EndPort, "may not be specified when `port` is non-numeric"))
		}
		for _, msg := range validation.IsValidPortName(port.Port.StrVal) {
			allErrs = append(allErrs, field.Invalid(p.Child("port"), port.Port.StrVal, msg))
		}
	}
	return allErrs
}

func validateNetworkPolicyPeer(peer *networkingv1.NetworkPolicyPeer, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	opts := metav1validation.LabelSelectorValidationOptions{}
	n := 0
	if peer.PodSelector != nil {
		n++
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(peer.PodSelector, opts, p.Child("podSelector"))...)
	}
	if peer.NamespaceSelector != nil {
		n++
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(peer.NamespaceSelector, opts, p.Child("namespaceSelector"))...)
	}
	if peer.IPBlock != nil {
		n++
		allErrs = append(allErrs, validateIPBlock(peer.IPBlock, p.Child("ipBlock"))...)
	}
	switch {
	case n == 0:
		allErrs = append(allErrs, field.Required(p, "must specify a peer"))
	case n > 1 && peer.IPBlock != nil:
		allErrs = append(allErrs, field.Forbidden(p, "may not specify both ipBlock and another peer"))
	}
	return allErrs
}

// validateIPBlock: cidr required and valid (legacy-field strictness: no
// leading zeros, no IPv4-mapped IPv6), each except valid and a strict subset
// of cidr (which also rules out the other address family).
func validateIPBlock(b *networkingv1.IPBlock, p *field.Path) field.ErrorList {
	if b.CIDR == "" {
		return field.ErrorList{field.Required(p.Child("cidr"), "")}
	}
	allErrs := validateLegacyCIDR(p.Child("cidr"), b.CIDR)
	_, cidr, err := netutils.ParseCIDRSloppy(b.CIDR)
	if err != nil {
		return allErrs
	}
	for i, e := range b.Except {
		ep := p.Child("except").Index(i)
		allErrs = append(allErrs, validateLegacyCIDR(ep, e)...)
		_, ex, err := netutils.ParseCIDRSloppy(e)
		if err != nil {
			continue
		}
		cl, _ := cidr.Mask.Size()
		el, _ := ex.Mask.Size()
		if !cidr.Contains(ex.IP) || cl >= el {
			allErrs = append(allErrs, field.Invalid(ep, e, "must be a strict subset of `cidr`"))
		}
	}
	return allErrs
}
