package service

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/clusterlab/clusterlab/netpol"
)

const goodPolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: allow-client
  namespace: shop
spec:
  podSelector:
    matchLabels: {app: web}
  ingress:
  - from:
    - podSelector: {matchLabels: {app: client}}
    - namespaceSelector: {matchLabels: {team: a}}
      podSelector: {matchExpressions: [{key: tier, operator: In, values: [front]}]}
    - ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}
    ports:
    - port: 80
    - port: http
      protocol: TCP
    - port: 8000
      endPort: 8080
      protocol: UDP
  egress:
  - to:
    - namespaceSelector: {}
    ports:
    - {port: 53, protocol: UDP}
    - {protocol: SCTP}
`

func TestNetworkPolicyLoadApplyDefaults(t *testing.T) {
	ms, err := Load("np.yaml", []byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || KindOf(ms[0].Object) != KindNetworkPolicy {
		t.Fatalf("loaded %+v", ms)
	}
	if got := describe(ms[0].Object); got != `NetworkPolicy "shop/allow-client"` {
		t.Errorf("describe: %s", got)
	}
	s := newStore(t, Config{})
	if err := s.ApplyManifests(ms); err != nil {
		t.Fatal(err)
	}
	np, ok := s.GetNetworkPolicy("shop", "allow-client")
	if !ok {
		t.Fatal("not stored")
	}
	// Defaulting: policyTypes from the rules present, protocol TCP where absent.
	if got := fmt.Sprint(np.Spec.PolicyTypes); got != "[Ingress Egress]" {
		t.Errorf("policyTypes %s", got)
	}
	if p := np.Spec.Ingress[0].Ports[0].Protocol; p == nil || *p != corev1.ProtocolTCP {
		t.Errorf("ingress port 0 protocol %v", p)
	}
	if p := np.Spec.Ingress[0].Ports[2].Protocol; *p != corev1.ProtocolUDP {
		t.Errorf("given protocol changed to %v", *p)
	}
	if _, ok := s.GetNamespace("shop"); !ok {
		t.Error("namespace shop not created with the policy")
	}
	if l := s.ListNetworkPolicies(); len(l) != 1 || l[0] != np {
		t.Errorf("list %v", l)
	}
	// The stored policy is one netpol evaluates.
	if _, err := netpol.NewIndex(s.ListNetworkPolicies(), nil, nil); err != nil {
		t.Error(err)
	}

	// Ingress only: no Egress type added; a policy with only egress rules
	// still gets [Ingress, Egress].
	for _, c := range []struct{ spec, want string }{
		{"{podSelector: {}}", "[Ingress]"},
		{"{podSelector: {}, ingress: [{}]}", "[Ingress]"},
		{"{podSelector: {}, egress: [{}]}", "[Ingress Egress]"},
		{"{podSelector: {}, egress: []}", "[Ingress]"},
		{"{podSelector: {}, policyTypes: [Egress]}", "[Egress]"},
	} {
		ms, err := Load("d.yaml", []byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: d}\nspec: "+c.spec+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		np := ms[0].Object.(*networkingv1.NetworkPolicy)
		Default(np)
		if got := fmt.Sprint(np.Spec.PolicyTypes); got != c.want {
			t.Errorf("%s: policyTypes %s, want %s", c.spec, got, c.want)
		}
	}

	// Deleting the namespace deletes its policies.
	if err := s.Delete(KindNamespace, "", "shop"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.GetNetworkPolicy("shop", "allow-client"); ok {
		t.Error("policy outlived its namespace")
	}
}

// TestNetworkPolicyValidation: each bad policy gets the API server's
// message at its field path, with file and line; nothing is applied.
func TestNetworkPolicyValidation(t *testing.T) {
	head := "apiVersion: v1\nkind: Service\nmetadata: {name: keep}\nspec: {ports: [{port: 80}]}\n---\n" +
		"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: np}\nspec:\n"
	// Lines: the policy's spec starts at line 10.
	tests := []struct {
		name, spec string
		want       []string // error texts (each must appear)
	}{
		{"bad protocol", "  podSelector: {}\n  ingress:\n  - ports:\n    - {port: 80, protocol: ICMP}\n",
			[]string{`np.yaml:13 (document 2 from line 6, NetworkPolicy "default/np"): spec.ingress[0].ports[0].protocol: Unsupported value: "ICMP": supported values: "TCP", "UDP", "SCTP"`}},
		{"port 0", "  podSelector: {}\n  egress:\n  - ports:\n    - port: 0\n",
			[]string{`np.yaml:13 `, `spec.egress[0].ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive`}},
		{"port too big", "  podSelector: {}\n  ingress:\n  - ports:\n    - port: 70000\n",
			[]string{`spec.ingress[0].ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive`}},
		{"bad port name", "  podSelector: {}\n  ingress:\n  - ports:\n    - port: Http_1\n",
			[]string{`spec.ingress[0].ports[0].port: Invalid value: "Http_1"`}},
		{"endPort below port", "  podSelector: {}\n  ingress:\n  - ports:\n    - {port: 90, endPort: 80}\n",
			[]string{"spec.ingress[0].ports[0].endPort: Invalid value: 80: must be greater than or equal to `port`"}},
		{"endPort with named port", "  podSelector: {}\n  ingress:\n  - ports:\n    - {port: http, endPort: 80}\n",
			[]string{"spec.ingress[0].ports[0].endPort: Invalid value: 80: may not be specified when `port` is non-numeric"}},
		{"endPort without port", "  podSelector: {}\n  ingress:\n  - ports:\n    - {endPort: 80}\n",
			[]string{"spec.ingress[0].ports[0].endPort: Invalid value: 80: may not be specified when `port` is not specified"}},
		{"empty peer", "  podSelector: {}\n  ingress:\n  - from:\n    - {}\n",
			[]string{`np.yaml:13 `, "spec.ingress[0].from[0]: Required value: must specify a peer"}},
		{"ipBlock with selector", "  podSelector: {}\n  egress:\n  - to:\n    - ipBlock: {cidr: 10.0.0.0/8}\n      podSelector: {}\n",
			[]string{"spec.egress[0].to[0]: Forbidden: may not specify both ipBlock and another peer"}},
		{"ipBlock without cidr", "  podSelector: {}\n  egress:\n  - to:\n    - ipBlock: {except: [10.0.0.0/8]}\n",
			[]string{"spec.egress[0].to[0].ipBlock.cidr: Required value"}},
		{"bad cidr", "  podSelector: {}\n  egress:\n  - to:\n    - ipBlock: {cidr: 10.0.0.0/33}\n",
			[]string{`spec.egress[0].to[0].ipBlock.cidr: Invalid value: "10.0.0.0/33"`}},
		{"except not a subset", "  podSelector: {}\n  egress:\n  - to:\n    - ipBlock: {cidr: 10.0.0.0/16, except: [10.1.0.0/24]}\n",
			[]string{"spec.egress[0].to[0].ipBlock.except[0]: Invalid value: \"10.1.0.0/24\": must be a strict subset of `cidr`"}},
		{"except equal to cidr", "  podSelector: {}\n  egress:\n  - to:\n    - ipBlock: {cidr: 10.0.0.0/16, except: [10.0.0.0/16]}\n",
			[]string{"ipBlock.except[0]: Invalid value: \"10.0.0.0/16\": must be a strict subset of `cidr`"}},
		{"except other family", "  podSelector: {}\n  egress:\n  - to:\n    - ipBlock: {cidr: 10.0.0.0/8, except: ['fd00::/64']}\n",
			[]string{"ipBlock.except[0]: Invalid value: \"fd00::/64\": must be a strict subset of `cidr`"}},
		{"bad policyType", "  podSelector: {}\n  policyTypes: [Ingress, Sideways]\n",
			[]string{`np.yaml:11 `, `spec.policyTypes[1]: Unsupported value: "Sideways": supported values: "Ingress", "Egress"`}},
		{"three policyTypes", "  podSelector: {}\n  policyTypes: [Ingress, Egress, Ingress]\n",
			[]string{`spec.policyTypes: Invalid value:`, "may not specify more than two policyTypes"}},
		{"bad selector operator", "  podSelector: {matchExpressions: [{key: a, operator: Near}]}\n",
			[]string{`spec.podSelector.matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator`}},
		{"In without values", "  podSelector: {}\n  ingress:\n  - from:\n    - podSelector: {matchExpressions: [{key: a, operator: In}]}\n",
			[]string{`spec.ingress[0].from[0].podSelector.matchExpressions[0].values: Required value: must be specified when `}},
		{"bad label value", "  podSelector: {matchLabels: {app: 'no spaces'}}\n",
			[]string{`spec.podSelector.matchLabels: Invalid value: "no spaces"`}},
		{"bad namespace selector key", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {'-x': a}}\n",
			[]string{`spec.ingress[0].from[0].namespaceSelector.matchLabels: Invalid value: "-x"`}},
		{"two errors", "  podSelector: {}\n  ingress:\n  - ports:\n    - port: 0\n    - {port: 1, protocol: ICMP}\n",
			[]string{"spec.ingress[0].ports[0].port", "spec.ingress[0].ports[1].protocol"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := Load("np.yaml", []byte(head+tc.spec))
			if err != nil {
				t.Fatal(err)
			}
			s := newStore(t, Config{})
			err = s.ApplyManifests(ms)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n  %v\ndoes not contain\n  %s", err, w)
				}
			}
			var me *ManifestError
			if !errors.As(err, &me) || !apierrors.IsInvalid(err) || me.File != "np.yaml" {
				t.Errorf("not a 422 ManifestError: %#v", err)
			}
			if _, ok := s.GetService("default", "keep"); ok {
				t.Error("the Service before the bad policy was applied")
			}
			if len(s.ListNetworkPolicies()) != 0 {
				t.Error("bad policy stored")
			}
			// Validate alone agrees (with defaulting), and netpol refuses
			// nothing Validate accepts (checked the other way in the fuzz
			// target).
			np := ms[1].Object.(*networkingv1.NetworkPolicy).DeepCopy()
			Default(np)
			if len(Validate(np)) == 0 {
				t.Error("Validate accepts it")
			}
		})
	}
}

func TestNetworkPolicyUpdate(t *testing.T) {
	s := newStore(t, Config{})
	ms, err := Load("np.yaml", []byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyManifests(ms); err != nil {
		t.Fatal(err)
	}
	np, _ := s.GetNetworkPolicy("shop", "allow-client")
	up := np.DeepCopy()
	up.Spec.Ingress = nil
	up.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if _, err := s.Update(up); err != nil {
		t.Fatal(err)
	}
	got, _ := s.GetNetworkPolicy("shop", "allow-client")
	if len(got.Spec.Ingress) != 0 || got.ResourceVersion == np.ResourceVersion {
		t.Errorf("update not stored: %+v", got)
	}
	bad := got.DeepCopy()
	bad.Spec.PolicyTypes = []networkingv1.PolicyType{"Nope"}
	if _, err := s.Update(bad); !apierrors.IsInvalid(err) {
		t.Errorf("bad update: %v", err)
	}
	if err := s.Delete(KindNetworkPolicy, "shop", "allow-client"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.GetNetworkPolicy("shop", "allow-client"); ok {
		t.Error("not deleted")
	}
}

// FuzzNetworkPolicy: loading, defaulting and validating a NetworkPolicy
// never panics, and every policy the validation accepts is one netpol can
// evaluate (the two agree on what a valid selector, CIDR and port is).
func FuzzNetworkPolicy(f *testing.F) {
	f.Add([]byte(goodPolicy))
	f.Add([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: d}\nspec: {podSelector: {}}\n"))
	f.Add([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicyList\nitems:\n- metadata: {name: a}\n  spec: {podSelector: {matchExpressions: [{key: k, operator: NotIn, values: [v]}]}, egress: [{to: [{ipBlock: {cidr: 'fd00::/8', except: ['fd00::/16']}}], ports: [{port: 1, endPort: 65535}]}]}\n"))
	f.Add([]byte(`{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"x"},"spec":{"podSelector":{},"ingress":[{"from":[{"ipBlock":{"cidr":"10.0.0.1/8","except":["10.0.0.0/9"]}}],"ports":[{"port":"dns","protocol":"UDP"}]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("hangs on %q", data)) })
		defer watchdog.Stop()
		ms, err := Load("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, m := range ms {
			np, ok := m.Object.(*networkingv1.NetworkPolicy)
			if !ok {
				continue
			}
			np = np.DeepCopy()
			Default(np)
			if el := Validate(np); len(el) > 0 {
				_ = m.AnnotateFields(el).Error()
				continue
			}
			if _, err := netpol.NewIndex([]*networkingv1.NetworkPolicy{np}, nil, nil); err != nil {
				t.Fatalf("valid policy netpol refuses: %v\n%s", err, data)
			}
			_ = netpol.RuleText(netpol.Ingress, nil, nil)
		}
	})
}

// TestValidateManifestsNetworkPolicy: the offline check (dns serve,
// generate, scenario loading) refuses bad and duplicate policies with the
// API server's words.
func TestValidateManifestsNetworkPolicy(t *testing.T) {
	text := goodPolicy + "---\n" + goodPolicy + "---\n" +
		"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: bad}\nspec:\n  podSelector: {}\n  egress:\n  - ports:\n    - {port: 80, endPort: 79}\n"
	ms, err := Load("nps.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	err = ValidateManifests(ms)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{
		`nps.yaml:32 (document 2 from line 29, NetworkPolicy "shop/allow-client"): metadata.name: NetworkPolicy "shop/allow-client" is defined twice (first at nps.yaml:4)`,
		`networkpolicies.networking.k8s.io "allow-client" already exists`,
		"nps.yaml:64 (document 3 from line 57, NetworkPolicy \"default/bad\"): spec.egress[0].ports[0].endPort: Invalid value: 79: must be greater than or equal to `port`",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error\n  %v\ndoes not contain\n  %s", err, w)
		}
	}
}

// TestNetworkPolicyDocsExamples: the examples of the Kubernetes
// documentation's Network Policies page (kubernetes.io/docs/concepts/
// services-networking/network-policies), loaded from YAML as written there,
// defaulted and validated here, and evaluated by netpol with the outcomes
// the page describes.
func TestNetworkPolicyDocsExamples(t *testing.T) {
	const docs = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: test-network-policy
  namespace: default
spec:
  podSelector:
    matchLabels:
      role: db
  policyTypes:
  - Ingress
  - Egress
  ingress:
  - from:
    - ipBlock:
        cidr: 172.17.0.0/16
        except:
        - 172.17.1.0/24
    - namespaceSelector:
        matchLabels:
          project: myproject
    - podSelector:
        matchLabels:
          role: frontend
    ports:
    - protocol: TCP
      port: 6379
  egress:
  - to:
    - ipBlock:
        cidr: 10.0.0.0/24
    ports:
    - protocol: TCP
      port: 5978
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: multi-port-egress
  namespace: default
spec:
  podSelector:
    matchLabels:
      role: db
  policyTypes:
    - Egress
  egress:
    - to:
        - ipBlock:
            cidr: 10.0.0.0/24
      ports:
        - protocol: TCP
          port: 32000
          endPort: 32768
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: alice-and
  namespace: shop
spec:
  podSelector: {}
  ingress:
  - from:
    - namespaceSelector:
        matchLabels:
          user: alice
      podSelector:
        matchLabels:
          role: client
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: alice-or
  namespace: shop2
spec:
  podSelector: {}
  ingress:
  - from:
    - namespaceSelector:
        matchLabels:
          user: alice
    - podSelector:
        matchLabels:
          role: client
`
	ms, err := Load("docs.yaml", []byte(docs))
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateManifests(ms); err != nil {
		t.Fatal(err)
	}
	var pols []*networkingv1.NetworkPolicy
	for _, m := range ms {
		np := m.Object.(*networkingv1.NetworkPolicy).DeepCopy()
		Default(np)
		pols = append(pols, np)
	}
	nss := []netpol.Namespace{
		{Name: "myproject", Labels: map[string]string{"project": "myproject"}},
		{Name: "alice", Labels: map[string]string{"user": "alice"}},
	}
	mk := func(ns, name, ip string, labels ...string) netpol.Pod {
		p := netpol.Pod{Namespace: ns, Name: name, Labels: map[string]string{}, IPs: []netip.Addr{netip.MustParseAddr(ip)}}
		for i := 0; i+1 < len(labels); i += 2 {
			p.Labels[labels[i]] = labels[i+1]
		}
		return p
	}
	pods := []netpol.Pod{
		mk("default", "db", "10.244.0.10", "role", "db"),
		mk("default", "frontend", "10.244.0.11", "role", "frontend"),
		mk("default", "other", "10.244.0.12"),
		mk("myproject", "any", "10.244.1.10"),
		mk("alice", "client", "10.244.2.10", "role", "client"),
		mk("alice", "other", "10.244.2.11"),
		mk("shop", "server", "10.244.3.10"),
		mk("shop", "client", "10.244.3.11", "role", "client"),
		mk("shop2", "server", "10.244.4.10"),
		mk("shop2", "client", "10.244.4.11", "role", "client"),
	}
	ix, err := netpol.NewIndex(pols, nss, pods)
	if err != nil {
		t.Fatal(err)
	}
	peer := func(s string) netpol.Peer {
		if a, err := netip.ParseAddr(s); err == nil {
			return netpol.IPPeer(a)
		}
		for _, p := range ix.Pods() {
			if p.Key() == s {
				return netpol.PodPeer(p)
			}
		}
		t.Fatalf("no pod %s", s)
		return netpol.Peer{}
	}
	for _, c := range []struct {
		from, to string
		port     uint16
		proto    corev1.Protocol
		want     bool
		why      string
	}{
		{"default/frontend", "default/db", 6379, corev1.ProtocolTCP, true, "role=frontend pods in default"},
		{"myproject/any", "default/db", 6379, corev1.ProtocolTCP, true, "any pod in a namespace labelled project=myproject"},
		{"172.17.0.5", "default/db", 6379, corev1.ProtocolTCP, true, "172.17.0.0-172.17.0.255"},
		{"172.17.2.5", "default/db", 6379, corev1.ProtocolTCP, true, "172.17.2.0-172.17.255.255"},
		{"172.17.1.5", "default/db", 6379, corev1.ProtocolTCP, false, "except 172.17.1.0/24"},
		{"default/other", "default/db", 6379, corev1.ProtocolTCP, false, "no rule for other pods"},
		{"default/frontend", "default/db", 6380, corev1.ProtocolTCP, false, "port 6379 only"},
		{"default/frontend", "default/db", 6379, corev1.ProtocolUDP, false, "TCP only"},
		{"default/db", "10.0.0.5", 5978, corev1.ProtocolTCP, true, "egress to 10.0.0.0/24 on TCP 5978"},
		{"default/db", "10.0.1.5", 5978, corev1.ProtocolTCP, false, "outside 10.0.0.0/24"},
		{"default/db", "10.0.0.5", 32000, corev1.ProtocolTCP, true, "endPort range start"},
		{"default/db", "10.0.0.5", 32768, corev1.ProtocolTCP, true, "endPort range end, inclusive"},
		{"default/db", "10.0.0.5", 32769, corev1.ProtocolTCP, false, "past endPort"},
		{"default/db", "default/frontend", 80, corev1.ProtocolTCP, false, "db's egress is isolated"},
		{"default/other", "default/frontend", 80, corev1.ProtocolTCP, true, "frontend is not selected"},
		{"alice/client", "shop/server", 80, corev1.ProtocolTCP, true, "AND: role=client in a user=alice namespace"},
		{"alice/other", "shop/server", 80, corev1.ProtocolTCP, false, "AND: namespace matches, pod does not"},
		{"shop/client", "shop/server", 80, corev1.ProtocolTCP, false, "AND: pod matches, namespace does not"},
		{"alice/other", "shop2/server", 80, corev1.ProtocolTCP, true, "OR: any pod of a user=alice namespace"},
		{"shop2/client", "shop2/server", 80, corev1.ProtocolTCP, true, "OR: role=client pods of the policy's namespace"},
		{"shop/client", "shop2/server", 80, corev1.ProtocolTCP, false, "OR: role=client of another namespace"},
	} {
		src, dst := peer(c.from), peer(c.to)
		v := ix.Verdict(src, dst, c.port, c.proto)
		ref := netpol.Reference(pols, nss, pods, src, dst, c.port, c.proto)
		if v.Allowed != c.want || ref != c.want {
			t.Errorf("%s -> %s %s/%d (%s): Index %v (%s), Reference %v, want %v", c.from, c.to, c.proto, c.port, c.why, v.Allowed, v.Reason, ref, c.want)
		}
	}
}

func TestNetworkPolicyBadName(t *testing.T) {
	ms, err := Load("n.yaml", []byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: Bad_Name\nspec: {podSelector: {}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = newStore(t, Config{}).ApplyManifests(ms)
	if err == nil || !strings.Contains(err.Error(), `n.yaml:4 (document 1 from line 1, NetworkPolicy "default/Bad_Name"): metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain`) {
		t.Errorf("got %v", err)
	}
}
