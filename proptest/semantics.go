package proptest

// Semantics are the behaviours in which proxy modes legitimately differ; the checkers
// hold a World to its Semantics. IPTablesSemantics are kube-proxy's iptables mode's.
type Semantics struct {
	// Name labels the semantics in messages.
	Name string
	// LocalhostNodePorts: NodePorts answer on 127.0.0.1 from the node itself (iptables
	// mode with --iptables-localhost-nodeports, IPv4 only).
	LocalhostNodePorts bool
	// AffinityExpires: once the ClientIP timeout has passed since a client's last
	// connection, its next one may go to any backend (iptables' recent match). IPVS
	// keeps a persistence template while connections that use it live.
	AffinityExpires bool
}

// IPTablesSemantics are kube-proxy's iptables mode's.
var IPTablesSemantics = Semantics{Name: "iptables", LocalhostNodePorts: true, AffinityExpires: true}
