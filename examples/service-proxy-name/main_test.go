package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestServiceProxyName(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	section := func(from, to string) string {
		i := strings.Index(s, from)
		j := strings.Index(s, to)
		if i < 0 || j < i {
			t.Fatalf("no section %q..%q in:\n%s", from, to, s)
		}
		return s[i:j]
	}
	// Which Services each node's proxy wrote rules for.
	for _, c := range []struct {
		from, to, selectors string
		has, hasNot         []string
	}{
		{"node-a (kube-proxy 1.34)", "node-b (", `Services "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name", EndpointSlices "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"`,
			[]string{"default/web:http"}, []string{"default/mesh", "default/unproxied"}},
		{"node-b (kube-proxy 1.37)", "node-c (", `Services "!service.kubernetes.io/service-proxy-name", EndpointSlices "!service.kubernetes.io/headless"`,
			[]string{"default/web:http", "default/unproxied:http"}, []string{"default/mesh"}},
		{"node-c (proxy my-proxy)", "client-a -> web", `Services "service.kubernetes.io/service-proxy-name=my-proxy", EndpointSlices "!service.kubernetes.io/headless"`,
			[]string{"default/mesh:http"}, []string{"default/web", "default/unproxied", "default/kubernetes"}},
	} {
		sec := section(c.from, c.to)
		if !strings.Contains(sec, "watches "+c.selectors) {
			t.Errorf("%s: selectors, want %s:\n%s", c.from, c.selectors, sec)
		}
		for _, h := range c.has {
			if !strings.Contains(sec, `"`+h+` cluster IP"`) {
				t.Errorf("%s: no rule for %s:\n%s", c.from, h, sec)
			}
		}
		for _, h := range c.hasNot {
			if strings.Contains(sec, h) {
				t.Errorf("%s: a rule for %s:\n%s", c.from, h, sec)
			}
		}
	}
	for _, want := range []string{
		`client-a -> web +connected pod default/web-0`,
		`client-a -> mesh +dropped \(no route to 10\.\S+ in the cluster network\)`,
		`client-a -> unproxied +dropped \(no route to`,
		`client-b -> web +connected pod default/web-0`,
		`client-b -> mesh +dropped \(no route to`,
		`client-b -> unproxied +connected pod default/web-0`,
		`client-c -> web +dropped \(no route to`,
		`client-c -> mesh +connected pod default/web-0`,
		`client-c -> unproxied +dropped \(no route to`,
		// The EndpointSlices are there, mesh's with the label copied from its Service;
		// the controller strips the headless label from a Service with a cluster IP.
		`EndpointSlice mesh-\S+: 1 endpoint\(s\), labels \S*service.kubernetes.io/service-proxy-name=my-proxy`,
		`EndpointSlice unproxied-\S+: 1 endpoint\(s\), labels endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io,kubernetes.io/service-name=unproxied\n`,
		// DNS answers with the cluster IPs as usual.
		`A mesh.default.svc.cluster.local.: NOERROR 10\.`,
		`A unproxied.default.svc.cluster.local.: NOERROR 10\.`,
	} {
		if !regexp.MustCompile(want).MatchString(s) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}
