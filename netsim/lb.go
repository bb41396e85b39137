package netsim

import "net/netip"

// loadBalancer is the simulated cloud load balancer for one ingress address.
type loadBalancer struct {
	c  *Cluster
	ip netip.Addr
}

func (lb *loadBalancer) receive(b []byte) {}

func (lb *loadBalancer) probe(pk *Packet, env *penv, nodeEnv func(*Node) *penv) walkEnd {
	return walkEnd{kind: endDropped, pk: pk, reason: "load balancer not implemented"}
}
