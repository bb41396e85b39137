package iptables

import (
	"fmt"
	"strconv"
	"testing"
)

// Chain names that appear in kube-proxy's tests and in the reference notes.
func TestChainNameHashes(t *testing.T) {
	svc := []struct{ spn, proto, hash string }{
		{"ns1/svc1:p80", "tcp", "XPGD46QRK7WJZT7O"},
		{"ns1/svc1", "tcp", "AQI2S6QIMU7PVVRP"},
		{"ns2/svc2:p80", "tcp", "GNZBNJ2PO5MGZ6GT"},
		{"ns3/svc3:p80", "tcp", "X27LE4BHSL4DOUIK"},
		{"ns4/svc4:p80", "tcp", "4SW47YFZTEDKD3PK"},
		{"ns5/svc5:p80", "tcp", "NUKIZ6OKUXPJNT4C"},
		{"ns2/svc2:p8080", "tcp", "2VJB64SDSIJUP5T6"},
		{"ns4/svc4:p8082", "tcp", "EBDQOQU5SJFXRIL3"},
		// Chains every cluster has, as seen in real iptables-save dumps.
		{"default/kubernetes:https", "tcp", "NPX46M4PTMTKRN6Y"},
		{"kube-system/kube-dns:dns", "udp", "TCOU7JCQXEZGVUNU"},
		{"kube-system/kube-dns:dns-tcp", "tcp", "ERIFXISQEP7F7OF4"},
		{"kube-system/kube-dns:metrics", "tcp", "JD5MR3NA4I4DYORP"},
	}
	for _, c := range svc {
		if got := PortProtoHash(c.spn, c.proto); got != c.hash {
			t.Errorf("PortProtoHash(%q, %q) = %s, want %s", c.spn, c.proto, got, c.hash)
		}
		n := ServiceChains(c.spn, c.proto)
		if n.Cluster != "KUBE-SVC-"+c.hash || n.Local != "KUBE-SVL-"+c.hash || n.External != "KUBE-EXT-"+c.hash || n.Firewall != "KUBE-FW-"+c.hash {
			t.Errorf("ServiceChains(%q) = %+v", c.spn, n)
		}
	}
	sep := []struct{ spn, proto, ep, chain string }{
		{"ns1/svc1:p80", "tcp", "10.180.0.1:80", "KUBE-SEP-SXIVWICOYRO3J4NJ"},
		{"ns5/svc5:p80", "tcp", "10.180.0.3:80", "KUBE-SEP-I77PXRDZVX7PMWMN"},
		{"ns3/svc3:p80", "tcp", "10.180.0.3:80", "KUBE-SEP-OYPFS5VJICHGATKP"},
		{"ns1/svc1:p80", "tcp", "10.0.1.1:80", "KUBE-SEP-SNQ3ZNILQDEJNDQO"},
		{"ns1/svc1:p80", "tcp", "10.0.0.0:80", "KUBE-SEP-DKGQUZGBKLTPAR56"},
		{"ns3/svc3:p8081", "tcp", "203.0.113.4:8081", "KUBE-SEP-RUVVH7YV3PHQBDOS"},
		{"ns4/svc4:p8082", "tcp", "10.4.0.1:8082", "KUBE-SEP-SU5STNODRYEWJAUF"},
	}
	for _, c := range sep {
		if got := EndpointChainName(c.spn, c.proto, c.ep); got != c.chain {
			t.Errorf("EndpointChainName(%q, %q, %q) = %s, want %s", c.spn, c.proto, c.ep, got, c.chain)
		}
		if len(c.chain) > 28 {
			t.Errorf("%s is longer than iptables allows", c.chain)
		}
	}
	for chain, want := range map[string]bool{
		"KUBE-SVC-X": true, "KUBE-SVL-X": true, "KUBE-EXT-X": true, "KUBE-FW-X": true, "KUBE-SEP-X": true,
		"KUBE-SERVICES": false, "KUBE-XLB-X": false, "KUBE-MARK-MASQ": false, "CNI-X": false,
	} {
		if IsServiceChain(chain) != want {
			t.Errorf("IsServiceChain(%s) != %v", chain, want)
		}
	}
}

// kube-proxy's TestComputeProbability, plus equality with fmt's %0.10f.
func TestProbability(t *testing.T) {
	for n, want := range map[int]string{
		1: "1.0000000000", 2: "0.5000000000", 3: "0.3333333333", 10: "0.1000000000", 100: "0.0100000000",
		1000: "0.0010000000", 10000: "0.0001000000", 100000: "0.0000100000", 100001: "0.0000099999",
	} {
		if got := Probability(n); got != want {
			t.Errorf("Probability(%d) = %s, want %s", n, got, want)
		}
	}
	prev := 0.0
	var cache probabilities
	for i := 100000; i > 1; i-- {
		s := Probability(i)
		if s != fmt.Sprintf("%0.10f", 1.0/float64(i)) {
			t.Fatalf("Probability(%d) = %s differs from %%0.10f", i, s)
		}
		if i%997 == 0 && cache.get(i) != s {
			t.Fatalf("cached probability of %d differs", i)
		}
		f, _ := strconv.ParseFloat(s, 64)
		if f <= prev {
			t.Fatalf("Probability(%d) = %s is not above Probability(%d)", i, s, i+1)
		}
		prev = f
	}
}

func TestJumpRules(t *testing.T) {
	got := ""
	for _, j := range JumpRules() {
		got += j.Table + " " + j.Chain + " " + j.Spec() + "\n"
	}
	want := `filter INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
filter FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
filter INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
filter FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
filter OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
filter FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
filter INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
filter OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
filter FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
nat OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
nat PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
nat POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
filter INPUT -j KUBE-FIREWALL
filter OUTPUT -j KUBE-FIREWALL
`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	args := JumpRules()[0].Args()
	if len(args) != 10 || args[7] != "kubernetes externally-visible service portals" {
		t.Errorf("Args: %q", args)
	}
}
