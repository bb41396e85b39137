package kernel

// NFAcct is an extended-accounting object (nfnetlink_acct): the named packet and byte
// counter that iptables' `-m nfacct --nfacct-name NAME` match adds to. kube-proxy
// creates two (localhost_nps_accepted_pkts, ct_state_invalid_dropped_pkts) and writes
// the rules that use them only when they exist; iptables-restore fails on such a rule
// otherwise (RULE_APPEND failed (No such file or directory)). Debian ships no nfacct
// tool by default, so this package speaks nfnetlink itself.
type NFAcct struct {
	Name    string
	Packets uint64
	Bytes   uint64
}
