package dns

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/service"
)

// TestGoResolverAbsoluteNames: Go code in a pod that writes an absolute name
// (trailing dot) gets it asked once, as glibc's res_nsearch asks such a name
// only as is; a relative name walks the pod's search list (ndots:5). Counted
// at the DNS pods, from their query log.
func TestGoResolverAbsoluteNames(t *testing.T) {
	c := simCluster(t, nil, "node-a", "node-b")
	cd := installDNS(t, c, ClusterDNSOptions{})
	mustApply(t, c, service.NewService("default/my-service", service.Selector("app=web"), service.Port("http", 80, 8080)))
	mustPod(t, c, service.NewPod("default/web-0", service.Labels("app=web"), service.ContainerPort("http", 8080, corev1.ProtocolTCP)))
	mustPod(t, c, service.NewPod("default/client", service.OnNode("node-b")))
	r := cd.Resolver("default", "client")
	svc, _ := c.Store().GetService("default", "my-service")
	webIP := cd.WebHost().IP().String()

	const zone = "default.svc.cluster.local. svc.cluster.local. cluster.local."
	expand := func(name string) []string { // the search-list walk of a relative name
		var out []string
		for _, d := range append(strings.Fields(zone), "") {
			out = append(out, "A "+name+"."+d, "AAAA "+name+"."+d)
		}
		for i := range out {
			out[i] = strings.TrimSuffix(out[i], ".") + "."
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		want    string
		queries []string // what the DNS pods received, in order
	}{
		{"my-service.default.svc.cluster.local.", svc.Spec.ClusterIP, []string{
			"A my-service.default.svc.cluster.local.", "AAAA my-service.default.svc.cluster.local."}},
		{"example.com.", webIP, []string{"A example.com.", "AAAA example.com."}},
		// Relative names: the walk, as before.
		{"my-service", svc.Spec.ClusterIP, []string{
			"A my-service.default.svc.cluster.local.", "AAAA my-service.default.svc.cluster.local."}},
		{"example.com", webIP, expand("example.com")},
		// Four dots are fewer than ndots:5: the search list first, its first
		// expansion NXDOMAIN, ..., the name as is last.
		{"my-service.default.svc.cluster.local", svc.Spec.ClusterIP, expand("my-service.default.svc.cluster.local")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cd.ResetLogs()
			addrs, err := r.NetResolver().LookupHost(simCtx(t), tc.name)
			if err != nil || !slices.Equal(addrs, []string{tc.want}) {
				t.Fatalf("LookupHost(%q): %v %v, want [%s]", tc.name, addrs, err, tc.want)
			}
			var got []string
			for _, q := range cd.ServerLog() {
				if strings.HasPrefix(q.Server, "kube-system/") {
					got = append(got, fmt.Sprintf("%s %s", mdns.TypeToString[q.Type], q.Name))
				}
			}
			slices.Sort(got) // A and AAAA of one name race between the two DNS pods
			want := slices.Clone(tc.queries)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("the DNS pods received %d queries:\n%s\nwant %d:\n%s", len(got), strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
			}
			if n := len(r.Queries()); n != len(tc.queries) {
				t.Errorf("the pod's stub sent %d queries, want %d", n, len(tc.queries))
			}
		})
	}

	// Other lookups keep the spelling too: an absolute SRV name and a PTR
	// name are asked once.
	cd.ResetLogs()
	if _, srvs, err := r.NetResolver().LookupSRV(simCtx(t), "http", "tcp", "my-service.default.svc.cluster.local."); err != nil || len(srvs) != 1 || srvs[0].Port != 80 {
		t.Errorf("LookupSRV: %v %v", srvs, err)
	}
	if names, err := r.NetResolver().LookupAddr(simCtx(t), svc.Spec.ClusterIP); err != nil || !slices.Equal(names, []string{"my-service.default.svc.cluster.local."}) {
		t.Errorf("LookupAddr: %v %v", names, err)
	}
	if n := len(cd.ServerLog()); n != 2 {
		t.Errorf("SRV and PTR lookups of absolute names: %d queries at the DNS pods, want 2: %v", n, cd.ServerLog())
	}
}
