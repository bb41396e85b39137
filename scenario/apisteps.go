package scenario

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
)

// API-level steps with no data-plane action of their own: a delete by label selector
// (delete: [{kind, selector, namespace}]) and a Service status update (update_status).

// deleteCollection deletes every object of ref.Kind in ref.Namespace whose labels
// match ref.Selector, in name order, and returns what it deleted.
func (r *runner) deleteCollection(ref ObjectRef) ([]string, error) {
	sel, err := labels.Parse(ref.Selector)
	if err != nil {
		return nil, err
	}
	ns := ref.Namespace
	if ns == "" {
		ns = "default"
	}
	var names []string
	for _, o := range r.c.Store().List(ref.Kind) { // sorted by namespace and name
		m, err := meta.Accessor(o)
		if err != nil || m.GetNamespace() != ns || !sel.Matches(labels.Set(m.GetLabels())) {
			continue
		}
		if err := r.c.Store().Delete(ref.Kind, ns, m.GetName()); err != nil {
			return names, err
		}
		names = append(names, ref.Kind+" "+ns+"/"+m.GetName())
	}
	if len(names) == 0 {
		names = append(names, fmt.Sprintf("no %s in %s matches %s", ref.Kind, ns, ref.Selector))
	}
	return names, nil
}

// parseIngress reads a load-balancer ingress: IP or IP/MODE (VIP or Proxy).
func parseIngress(v string) (corev1.LoadBalancerIngress, error) {
	ip, mode, hasMode := strings.Cut(v, "/")
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return corev1.LoadBalancerIngress{}, fmt.Errorf("want IP or IP/VIP or IP/Proxy, got %q", v)
	}
	ing := corev1.LoadBalancerIngress{IP: a.String()}
	if hasMode {
		var m corev1.LoadBalancerIPMode
		switch strings.ToLower(mode) {
		case "vip":
			m = corev1.LoadBalancerIPModeVIP
		case "proxy":
			m = corev1.LoadBalancerIPModeProxy
		default:
			return corev1.LoadBalancerIngress{}, fmt.Errorf("ipMode %q: want VIP or Proxy", mode)
		}
		ing.IPMode = &m
	}
	return ing, nil
}

// updateStatus writes a Service's status.loadBalancer.ingress through the status
// subresource.
func (r *runner) updateStatus(u *UpdateStatus, res *StepResult) error {
	ns, n := splitKey(u.Service)
	cur, ok := r.c.Store().GetService(ns, n)
	if !ok {
		return fmt.Errorf("no service %s/%s", ns, n)
	}
	svc := cur.DeepCopy()
	svc.Status.LoadBalancer.Ingress = nil
	var ips []string
	for _, v := range u.LoadBalancerIngress {
		ing, err := parseIngress(v)
		if err != nil {
			return err
		}
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, ing)
		ips = append(ips, v)
	}
	if _, err := r.c.Store().UpdateStatus(svc); err != nil {
		return fmt.Errorf("the API server rejects it: %w", err)
	}
	now, _ := r.c.Store().GetService(ns, n)
	var got []string
	for _, ing := range now.Status.LoadBalancer.Ingress {
		s := ing.IP
		if ing.IPMode != nil {
			s += " (" + string(*ing.IPMode) + ")"
		}
		got = append(got, s)
	}
	res.Summary = fmt.Sprintf("service %s/%s: status.loadBalancer.ingress [%s]", ns, n, strings.Join(got, ", "))
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil && !sameIngress(now, ips) {
		res.Details = append(res.Details, "the simulated cloud load balancer owns this Service's status and set it back (give the Service a loadBalancerClass to write it yourself)")
	}
	return nil
}

func sameIngress(svc *corev1.Service, want []string) bool {
	if len(svc.Status.LoadBalancer.Ingress) != len(want) {
		return false
	}
	for i, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP != strings.Split(want[i], "/")[0] {
			return false
		}
	}
	return true
}
