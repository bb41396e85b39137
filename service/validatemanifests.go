package service

import (
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateManifests checks every loaded object with the service package's
// validation, as the API server would on create (service.Default, then
// service.Validate; a Service's status with service.ValidateServiceStatus),
// and returns every problem as a ManifestError naming the file, the
// line of the field, the object and the field path. The objects themselves
// are not changed: each is checked on a defaulted copy.
//
// What an API server would have filled in before validating is filled in
// on the copy, as its registry does: the namespace "default" for an object
// without one, and spec.clusterIPs from spec.clusterIP. The checks of the
// Store that depend on a cluster's configuration are not made: cluster IPs
// need not lie inside any service CIDR (they are served as given), node
// ports need not lie in a node-port range, and a LoadBalancer Service with
// externalTrafficPolicy Local may lack the healthCheckNodePort the
// registry would allocate. Two objects of one kind, namespace and name, and
// two Services on one cluster IP, are errors naming both places (Conflicts), as
// the API server refuses the second create. clusterlab dns serve and generate
// validate their manifests with it; run's scenario loading makes the same checks.
func ValidateManifests(ms []Manifest) error {
	var errs []error
	var conflicts Conflicts
	for _, m := range ms {
		if err := conflicts.Check(m); err != nil {
			errs = append(errs, err)
		}
		obj := m.Object.DeepCopyObject()
		if acc, err := meta.Accessor(obj); err == nil && acc.GetNamespace() == "" && IsNamespaced(KindOf(obj)) {
			acc.SetNamespace(corev1.NamespaceDefault)
		}
		Default(obj)
		var el field.ErrorList
		ipsFilled := false
		if svc, ok := obj.(*corev1.Service); ok {
			if svc.Spec.ClusterIP != "" && len(svc.Spec.ClusterIPs) == 0 {
				svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
				ipsFilled = true
			}
			for _, e := range Validate(svc) {
				if e.Type == field.ErrorTypeRequired && e.Field == "spec.healthCheckNodePort" {
					continue // a cluster allocates it
				}
				el = append(el, e)
			}
			el = append(el, ValidateServiceStatus(svc)...)
		} else {
			el = Validate(obj)
		}
		if len(el) == 0 {
			continue
		}
		err := m.AnnotateFields(el)
		if ipsFilled {
			// spec.clusterIPs is not in the file: point at spec.clusterIP.
			var joined interface{ Unwrap() []error }
			if errors.As(err, &joined) {
				for _, e := range joined.Unwrap() {
					var me *ManifestError
					if errors.As(e, &me) && strings.HasPrefix(me.Field, "spec.clusterIPs") {
						me.Line = m.FieldLine("spec.clusterIP")
					}
				}
			}
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
