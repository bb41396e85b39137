package hostlink

import (
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/proxy"
)

// A SOCKS5 request for an IPv6 address (ATYP 4) reaches the IPv6 ClusterIP of a
// dual-stack Service from a dual-stack pod, in every mode that has IPv6.
func TestSOCKS5IPv6(t *testing.T) {
	for _, mode := range []string{"iptables", "ipvs", "nftables"} {
		t.Run(mode, func(t *testing.T) {
			live, k := startLive(t, "testdata/dualstack.yaml", mode, "pod:default/client")
			svc, _ := live.Cluster().Store().GetService("default", "web")
			var v6 netip.Addr
			for _, ip := range svc.Spec.ClusterIPs {
				if a, err := netip.ParseAddr(ip); err == nil && a.Is6() {
					v6 = a
				}
			}
			if !v6.IsValid() {
				t.Fatalf("no IPv6 cluster IP in %v", svc.Spec.ClusterIPs)
			}
			d, _ := proxy.SOCKS5("tcp", k.SOCKSAddr.String(), nil, proxy.Direct)
			hc := &http.Client{Transport: &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext}, Timeout: 30 * time.Second}
			w, err := httpWhoami(hc, "http://"+net.JoinHostPort(v6.String(), "80")+"/")
			if err != nil {
				t.Fatal(err)
			}
			seen, _ := netip.ParseAddrPort(w.Client)
			var want netip.Addr
			for _, a := range live.Cluster().Pod("default", "client").IPs() {
				if a.Is6() {
					want = a
				}
			}
			if seen.Addr() != want {
				t.Errorf("the backend %s saw %s, want the client pod's IPv6 %s", w.Pod, seen.Addr(), want)
			}
		})
	}
}
