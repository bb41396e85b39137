// Package netfilter is the vocabulary clusterlab's datapath and its rule engines share:
// the five hooks and netfilter's priorities, IP protocol numbers and TCP flags,
// conntrack states and status bits, the kinds of REJECT and of NAT. It is a leaf: it
// imports nothing of clusterlab, and netsim (the datapath), the iptables emulator, the
// IPVS model and every handler that sits at a hook speak it.
//
//	        netfilter (this package: words only)
//	       ▲          ▲             ▲
//	     netsim   proxy/iptables/  proxy/ipvs/emulator, ...
//	(the datapath)    emulator      (rule engines, handlers)
//
// The values are the kernel's where the kernel has them (NF_IP_PRI_* priorities, IPS_*
// status bits, IANA protocol numbers, TCP header flag bits, ICMP types and codes).
package netfilter
