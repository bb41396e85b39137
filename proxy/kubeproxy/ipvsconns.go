package kubeproxy

import (
	"github.com/clusterlab/clusterlab/cluster"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

// IPVSConnections returns the IPVS connection table of node n's kube-proxy (entries and
// persistence templates, in creation order, as `ipvsadm -Lnc` lists them), and false
// when the node's proxy is not the IPVS mode's.
func IPVSConnections(n *cluster.Node) ([]ipvsemu.ConnEntry, bool) {
	p, ok := n.Proxy().(*ipvsProxy)
	if !ok {
		return nil, false
	}
	return p.model.Connections(), true
}
