#!/bin/sh
# clusterlab collect: gather one node's networking state into a directory (and a
# tarball next to it) for `clusterlab trace --node DIR`. Run it as root on the node,
# or through `kubectl debug node/NAME` (chroot /host first). It only reads: every
# command lists state, none changes it. A tool that is missing or fails leaves a
# FILE.err saying so; the trace says what it assumed for it.
set -u
out="${1:-clusterlab-node-$(hostname 2>/dev/null || echo node)-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out" || exit 1
run() {
	f="$1"
	shift
	if ! command -v "$1" >/dev/null 2>&1; then
		echo "$1: not installed" >"$out/$f.err"
		return
	fi
	"$@" >"$out/$f" 2>"$out/$f.err"
	rc=$?
	[ "$rc" -eq 0 ] || echo "exit status $rc: $*" >>"$out/$f.err"
	[ -s "$out/$f.err" ] || rm -f "$out/$f.err"
}
run iptables-save.txt iptables-save -c
run ip6tables-save.txt ip6tables-save -c
run nft-ruleset.txt nft list ruleset
run ipset-save.txt ipset save
run ipvsadm-Sn.txt ipvsadm -Sn
run ipvsadm-Ln-stats.txt ipvsadm -Ln --stats
run conntrack-L.txt conntrack -L
run conntrack-S.txt conntrack -S
run ip-addr.json ip -j addr show
run ip-route.json ip -j route show table all
run ip-link.json ip -j -d link show
run ip-neigh.json ip -j neigh show
run bridge-fdb.json bridge -j fdb show
run uname.txt uname -r
: >"$out/sysctl.txt"
for k in net.ipv4.ip_forward net.ipv6.conf.all.forwarding net.ipv4.conf.all.route_localnet \
	net.ipv4.conf.all.rp_filter net.ipv4.conf.default.rp_filter net.bridge.bridge-nf-call-iptables \
	net.bridge.bridge-nf-call-ip6tables net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_be_liberal \
	net.netfilter.nf_conntrack_udp_timeout net.netfilter.nf_conntrack_udp_timeout_stream \
	net.ipv4.vs.conntrack net.ipv4.vs.conn_reuse_mode net.ipv4.vs.expire_nodest_conn \
	net.ipv4.vs.expire_quiescent_template; do
	if v=$(sysctl -n "$k" 2>/dev/null); then
		echo "$k = $v" >>"$out/sysctl.txt"
	else
		# Absent, not unknown: net.bridge.* exist only while br_netfilter is loaded.
		echo "# not present: $k" >>"$out/sysctl.txt"
	fi
done
if command -v kube-proxy >/dev/null 2>&1; then
	kube-proxy --version >"$out/kube-proxy-version.txt" 2>&1
fi
# kube-proxy's configuration as it runs (its metrics address serves /configz).
if command -v curl >/dev/null 2>&1; then
	curl -s --max-time 2 http://127.0.0.1:10249/configz >"$out/kube-proxy-configz.json" 2>/dev/null || rm -f "$out/kube-proxy-configz.json"
	[ -s "$out/kube-proxy-configz.json" ] || rm -f "$out/kube-proxy-configz.json"
fi
tar -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")" 2>/dev/null
echo "$out"
