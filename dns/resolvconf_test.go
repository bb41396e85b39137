package dns

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/service"
)

const nodeResolvConf = `# the node's /etc/resolv.conf
nameserver 10.255.255.53
nameserver 10.255.255.54
search corp.example.com. example.com
options timeout:2 rotate
`

// podFromYAML decodes one Pod manifest.
func podFromYAML(t *testing.T, text string) *corev1.Pod {
	t.Helper()
	// A leading comment keeps flow-style YAML from being sniffed as JSON.
	ms, err := service.Load("pod.yaml", []byte("# pod\n"+text))
	if err != nil {
		t.Fatal(err)
	}
	pod, ok := ms[0].Object.(*corev1.Pod)
	if !ok || len(ms) != 1 {
		t.Fatalf("want one Pod, got %v", ms)
	}
	return pod
}

func TestPodResolvConf(t *testing.T) {
	host, err := ParseResolvConf(nodeResolvConf)
	if err != nil {
		t.Fatal(err)
	}
	kubelet := KubeletDNS{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", HostResolvConf: &host}
	long := strings.Repeat("a", 250) + ".com"
	for _, tc := range []struct {
		name     string
		kubelet  *KubeletDNS
		pod      string
		want     string
		warnings []string
	}{
		{name: "ClusterFirst (default policy)",
			pod: `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: default}, spec: {containers: [{name: c, image: i}]}}`,
			want: "search default.svc.cluster.local svc.cluster.local cluster.local corp.example.com example.com\n" +
				"nameserver 10.96.0.10\noptions ndots:5\n"},
		{name: "ClusterFirst in another namespace",
			pod: `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: testns}, spec: {dnsPolicy: ClusterFirst, containers: [{name: c, image: i}]}}`,
			want: "search testns.svc.cluster.local svc.cluster.local cluster.local corp.example.com example.com\n" +
				"nameserver 10.96.0.10\noptions ndots:5\n"},
		{name: "hostNetwork ClusterFirst falls back to Default",
			pod:  `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: default}, spec: {hostNetwork: true, containers: [{name: c, image: i}]}}`,
			want: "search corp.example.com example.com\nnameserver 10.255.255.53\nnameserver 10.255.255.54\noptions timeout:2 rotate\n"},
		{name: "hostNetwork ClusterFirstWithHostNet",
			pod: `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: default}, spec: {hostNetwork: true, dnsPolicy: ClusterFirstWithHostNet, containers: [{name: c, image: i}]}}`,
			want: "search default.svc.cluster.local svc.cluster.local cluster.local corp.example.com example.com\n" +
				"nameserver 10.96.0.10\noptions ndots:5\n"},
		{name: "Default",
			pod:  `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: default}, spec: {dnsPolicy: Default, containers: [{name: c, image: i}]}}`,
			want: "search corp.example.com example.com\nnameserver 10.255.255.53\nnameserver 10.255.255.54\noptions timeout:2 rotate\n"},
		{name: "None with dnsConfig",
			pod: `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  dnsPolicy: None
  dnsConfig:
    nameservers: [192.0.2.1]
    searches: [ns1.svc.cluster-domain.example, my.dns.search.suffix]
    options:
    - {name: ndots, value: "2"}
    - {name: edns0}
  containers: [{name: c, image: i}]
`,
			want: "search ns1.svc.cluster-domain.example my.dns.search.suffix\nnameserver 192.0.2.1\noptions ndots:2 edns0\n"},
		{name: "ClusterFirst merged with dnsConfig",
			pod: `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  dnsConfig:
    nameservers: [10.96.0.10, 8.8.8.8]
    searches: [svc.cluster.local, extra.local]
    options:
    - {name: ndots, value: "2"}
    - {name: single-request-reopen}
  containers: [{name: c, image: i}]
`,
			want: "search default.svc.cluster.local svc.cluster.local cluster.local corp.example.com example.com extra.local\n" +
				"nameserver 10.96.0.10\nnameserver 8.8.8.8\noptions ndots:2 single-request-reopen\n"},
		{name: "limits: nameservers",
			pod: `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  dnsConfig: {nameservers: [1.1.1.1, 8.8.8.8, 9.9.9.9]}
  containers: [{name: c, image: i}]
`,
			want: "search default.svc.cluster.local svc.cluster.local cluster.local corp.example.com example.com\n" +
				"nameserver 10.96.0.10\nnameserver 1.1.1.1\nnameserver 8.8.8.8\noptions ndots:5\n",
			warnings: []string{"Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 10.96.0.10 1.1.1.1 8.8.8.8"}},
		{name: "limits: a search domain over 253 characters",
			pod:      `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: default}, spec: {dnsPolicy: None, dnsConfig: {searches: [a.example, ` + long + `, b.example]}, containers: [{name: c, image: i}]}}`,
			want:     "search a.example b.example\n",
			warnings: []string{"Search Line limits were exceeded, some search paths have been omitted, the applied search line is: a.example b.example"}},
		{name: "no cluster DNS: Default with a warning",
			kubelet:  &KubeletDNS{ClusterDomain: "cluster.local", HostResolvConf: &host},
			pod:      `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: default}, spec: {containers: [{name: c, image: i}]}}`,
			want:     "search corp.example.com example.com\nnameserver 10.255.255.53\nnameserver 10.255.255.54\noptions timeout:2 rotate\n",
			warnings: []string{`kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`}},
		{name: "Default without a node resolv.conf",
			kubelet: &KubeletDNS{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local",
				NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.1.5"), netip.MustParseAddr("fd00::5")}},
			pod:  `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: default}, spec: {dnsPolicy: Default, containers: [{name: c, image: i}]}}`,
			want: "search .\nnameserver 127.0.0.1\nnameserver ::1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := kubelet
			if tc.kubelet != nil {
				k = *tc.kubelet
			}
			got, warnings := PodResolvConf(podFromYAML(t, tc.pod), k)
			if got.String() != tc.want {
				t.Errorf("resolv.conf:\n%s\nwant:\n%s", got, tc.want)
			}
			if !reflect.DeepEqual(warnings, tc.warnings) {
				t.Errorf("warnings %q, want %q", warnings, tc.warnings)
			}
		})
	}
}

func TestSearchLineLimits(t *testing.T) {
	var searches []string
	for i := 0; i < 40; i++ {
		searches = append(searches, "d"+strings.Repeat("x", 60)+"-"+string(rune('a'+i%26))+".example")
	}
	got, cut := fitSearches(searches)
	if !cut {
		t.Fatal("no cut reported")
	}
	if len(got) > MaxSearchPaths || len(strings.Join(got, " ")) > MaxSearchListChars {
		t.Fatalf("%d domains, %d chars", len(got), len(strings.Join(got, " ")))
	}
	// 32 domains of 71 characters are 2303 characters: cut from the end to fit.
	if len(got) != 28 || got[0] != searches[0] || got[27] != searches[27] {
		t.Errorf("kept %d domains, want the first 28", len(got))
	}
}

func TestParseResolvConf(t *testing.T) {
	c, err := ParseResolvConf(nodeResolvConf + "search last.example\n; comment\noptions ndots:3 attempts:9\n")
	if err != nil {
		t.Fatal(err)
	}
	want := ResolvConf{
		Nameservers: []string{"10.255.255.53", "10.255.255.54"},
		Searches:    []string{"last.example"},
		Options:     []string{"ndots:3", "attempts:9"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %#v, want %#v", c, want)
	}
	if c.Ndots() != 3 || c.Attempts() != 5 || c.Timeout().Seconds() != 5 {
		t.Errorf("ndots %d attempts %d timeout %v; want 3, 5 (capped), 5s", c.Ndots(), c.Attempts(), c.Timeout())
	}
	if _, err := ParseResolvConf("search a\nnameserver\n"); err == nil || !strings.Contains(err.Error(), "resolv.conf:2:") {
		t.Errorf("bad nameserver line: err %v, want one naming line 2", err)
	}
}

// FuzzParseResolvConf: parsing never panics, and what String prints parses
// back to the same configuration.
func FuzzParseResolvConf(f *testing.F) {
	f.Add(nodeResolvConf)
	f.Add("search a b\nsearch c.\ndomain d\noptions ndots:5 ndots:1\n")
	f.Add("nameserver\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseResolvConf(text)
		if err != nil {
			return
		}
		_ = c.Ndots()
		_ = c.Attempts()
		_ = c.Timeout()
		again, err := ParseResolvConf(c.String())
		if err != nil {
			t.Fatalf("re-parse of %q: %v", c.String(), err)
		}
		if c.String() != again.String() {
			t.Fatalf("round trip:\n%q\n%q", c.String(), again.String())
		}
	})
}
