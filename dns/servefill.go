package dns

import (
	"net/netip"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/clusterlab/clusterlab/service"
)

// The service ranges `dns serve` allocates from for Services that have no
// cluster IP in the manifests: kube-apiserver's default IPv4 range and kind's
// default IPv6 one.
var (
	ServeServiceCIDRv4 = netip.MustParsePrefix("10.96.0.0/12")
	ServeServiceCIDRv6 = netip.MustParsePrefix("fd00:10:96::/112")
)

// completeObjects is service.CompleteObjects with the ranges `dns serve` allocates
// from.
func completeObjects(objs []runtime.Object) ([]runtime.Object, []string) {
	return service.CompleteObjects(objs, []netip.Prefix{ServeServiceCIDRv4, ServeServiceCIDRv6})
}

func nsOrDefault(ns string) string { return service.NamespaceOrDefault(ns) }
