package service

import (
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Conflicts finds, in manifests taken one after the other, what the API server
// would refuse on the second of two creates: an object of the same kind, namespace
// and name as an earlier one (kube-apiserver: `services "web" already exists`,
// AlreadyExists) and a Service asking for a cluster IP an earlier one has
// (`spec.clusterIPs: Invalid value: ...: provided IP is already allocated`). The
// errors name both places, file:line. `dns serve`, `generate` (through
// ValidateManifests) and `run` (scenario manifests) all check with it, so the three
// refuse the same files with the same messages. The zero value is ready to use.
type Conflicts struct {
	names map[string]Manifest     // "Kind ns/name"
	ips   map[netip.Addr]ipHolder // cluster IP → the Service that has it
}

type ipHolder struct {
	m     Manifest
	field string
}

// Check records m and returns a ManifestError (or several, joined) when it
// conflicts with one checked before; a conflicting object is not recorded.
func (c *Conflicts) Check(m Manifest) error {
	if c.names == nil {
		c.names = map[string]Manifest{}
		c.ips = map[netip.Addr]ipHolder{}
	}
	meta := objectMeta(m.Object)
	if meta == nil {
		return nil
	}
	kind := KindOf(m.Object)
	ns := meta.Namespace
	if ns == "" && IsNamespaced(kind) {
		ns = corev1.NamespaceDefault
	}
	key := kind + " " + ns + "/" + meta.Name
	if first, dup := c.names[key]; dup {
		exists := apierrors.NewAlreadyExists(resources[kind], meta.Name)
		return m.newError("metadata.name", fmt.Sprintf("metadata.name: %s is defined twice (first at %s): the API server refuses the second create: %s",
			describe(m.Object), first.position("metadata.name"), exists.Error()), exists)
	}
	svc, ok := m.Object.(*corev1.Service)
	if !ok {
		c.names[key] = m
		return nil
	}
	type want struct {
		ip    netip.Addr
		field string
	}
	var wants []want
	if len(svc.Spec.ClusterIPs) > 0 {
		for i, s := range svc.Spec.ClusterIPs {
			if ip, err := netip.ParseAddr(s); err == nil {
				wants = append(wants, want{ip.Unmap(), fmt.Sprintf("spec.clusterIPs[%d]", i)})
			}
		}
	} else if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil {
		wants = append(wants, want{ip.Unmap(), "spec.clusterIP"})
	}
	var errs []error
	for _, w := range wants {
		if h, taken := c.ips[w.ip]; taken {
			errs = append(errs, m.newError(w.field, fmt.Sprintf("%s: Invalid value: %q: provided IP is already allocated (to %s at %s)",
				w.field, w.ip.String(), describe(h.m.Object), h.m.position(h.field)), nil))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	c.names[key] = m
	for _, w := range wants {
		c.ips[w.ip] = ipHolder{m, w.field}
	}
	return nil
}

// position is file:line of a field of the manifest.
func (m Manifest) position(field string) string {
	return fmt.Sprintf("%s:%d", m.File, m.FieldLine(field))
}
