package proxy

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

var update = flag.Bool("update", false, "rewrite docs/VERSIONS.md from the tables")

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{"1.24": 24, "v1.18": 18, "1.33.2": 33, " 1.37 ": 37} {
		got, err := ParseVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1", "2.1", "1.x", "1.024", "1.24.x", "1.-1"} {
		if v, err := ParseVersion(in); err == nil {
			t.Errorf("ParseVersion(%q) = %v, want an error", in, v)
		}
	}
	if err := Version(17).CheckModelled(); err == nil || !strings.Contains(err.Error(), "the oldest release modelled is 1.18") {
		t.Errorf("1.17: %v", err)
	}
	if err := Version(99).CheckModelled(); err == nil || !strings.Contains(err.Error(), "the newest release modelled is 1.37") {
		t.Errorf("1.99: %v", err)
	}
	if Version(0).String() != "current" || Version(0).Resolved() != NewestVersion || !Version(0).AtLeast(int(NewestVersion)) {
		t.Error("the zero Version is not the newest release")
	}
}

// Gate defaults follow the stages, with TopologyAwareHints' beta off in 1.23.
func TestGateDefaults(t *testing.T) {
	for _, tc := range []struct {
		gate string
		v    Version
		want bool
	}{
		{"ProxyTerminatingEndpoints", 21, false}, // does not exist yet
		{"ProxyTerminatingEndpoints", 22, false}, // alpha
		{"ProxyTerminatingEndpoints", 25, false},
		{"ProxyTerminatingEndpoints", 26, true}, // beta, on
		{"ProxyTerminatingEndpoints", 28, true}, // GA
		{"TopologyAwareHints", 23, false},       // beta, off by mistake
		{"TopologyAwareHints", 24, true},
		{"PreferSameTrafficDistribution", 33, false},
		{"PreferSameTrafficDistribution", 34, true},
		{"KubeProxyNFTablesLocalhostNodePorts", 37, false},
	} {
		nc := NodeConfig{Version: tc.v}
		if got := nc.GateEnabled(tc.gate); got != tc.want {
			t.Errorf("%s in %s: %v, want %v", tc.gate, tc.v, got, tc.want)
		}
	}
	// An override turns a gate on or off where the release has it.
	nc := NodeConfig{Version: 25, FeatureGates: map[string]bool{"ProxyTerminatingEndpoints": true}}
	if !nc.GateEnabled("ProxyTerminatingEndpoints") || nc.Validate() != nil {
		t.Errorf("alpha gate turned on in 1.25: %v %v", nc.GateEnabled("ProxyTerminatingEndpoints"), nc.Validate())
	}
}

func TestFeatureGateErrors(t *testing.T) {
	for _, tc := range []struct {
		v     Version
		gates map[string]bool
		want  string
	}{
		{30, map[string]bool{"NoSuch": true}, `unknown feature gate "NoSuch"`},
		{30, map[string]bool{"PreferSameTrafficDistribution": true}, "PreferSameTrafficDistribution does not exist in kube-proxy 1.30 (alpha in 1.33)"},
		{30, map[string]bool{"ProxyTerminatingEndpoints": false}, "cannot set feature gate ProxyTerminatingEndpoints to false, feature is locked to true (GA in 1.28)"},
		{10, nil, "version: kube-proxy 1.10 is older than the model"},
	} {
		nc := NodeConfig{Version: tc.v, FeatureGates: tc.gates}
		if err := nc.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v, want %q", tc.v, tc.gates, err, tc.want)
		}
	}
}

// TestNodeHintsFollowTheGate: an endpoint hinted for this node is kept to it from 1.34
// (PreferSameTrafficDistribution beta, on) and its node hint ignored in 1.33 (alpha,
// off) unless --feature-gates turns it on.
func TestNodeHintsFollowTheGate(t *testing.T) {
	hinted := slice("ns1", "svc1", 1, func(s *discoveryv1.EndpointSlice) {
		s.Ports = []discoveryv1.EndpointPort{port("p", 80, corev1.ProtocolTCP)}
		s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"},
			Hints: &discoveryv1.EndpointHints{ForNodes: []discoveryv1.ForNode{{Name: "n1"}}}}}
	})
	for _, tc := range []struct {
		nc   NodeConfig
		want bool
	}{
		{NodeConfig{Version: 33}, false},
		{NodeConfig{Version: 34}, true},
		{NodeConfig{Version: 33, FeatureGates: map[string]bool{"PreferSameTrafficDistribution": true}}, true},
		{NodeConfig{}, true},
		{NodeConfig{IgnoreNodeHints: true}, false},
	} {
		em, err := BuildEndpointsMap([]*discoveryv1.EndpointSlice{hinted}, corev1.IPv4Protocol, &tc.nc)
		if err != nil {
			t.Fatal(err)
		}
		for _, eps := range em {
			if got := eps[0].HasNodeHint("n1"); got != tc.want || tc.nc.Has("prefer-same-node-hints") != tc.want {
				t.Errorf("%s gates %v: node hint kept %v, Has %v; want %v", tc.nc.Version, tc.nc.FeatureGates, got, tc.nc.Has("prefer-same-node-hints"), tc.want)
			}
		}
	}
}

// Every change is documented, names a known gate, and every modelled one a test; Has
// panics on an unknown name.
func TestChangeTable(t *testing.T) {
	if len(Changes()) == 0 {
		t.Fatal("no changes registered")
	}
	for _, c := range Changes() {
		if c.Modelled != ModelledNo && c.Test == "" {
			t.Errorf("change %s is modelled (%s) but names no test", c.Name, c.Modelled)
		}
		if c.Version == 0 && c.Gate == "" && c.Kernel == "" {
			t.Errorf("change %s has neither a release, a gate nor a kernel", c.Name)
		}
		if c.Version != 0 && (c.Version < OldestVersion || c.Version > NewestVersion+1) {
			t.Errorf("change %s: release %s outside the model", c.Name, c.Version)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Has of an unknown change did not panic")
		}
	}()
	(&NodeConfig{}).Has("no-such-change")
}

func TestPartlyModelled(t *testing.T) {
	saved := changes
	t.Cleanup(func() { changes = saved })
	changes = nil
	registerChanges(
		Change{Name: "a", Version: 20, Doc: "d", Modelled: ModelledPartly, Note: "n", Test: "T"},
		Change{Name: "b", Version: 25, Doc: "d", Modelled: ModelledNo},
		Change{Name: "c", Version: 25, Doc: "d", Modelled: ModelledYes, Test: "T"},
		Change{Name: "d", Version: 25, Doc: "d", Modelled: ModelledNo, Modes: []string{"ipvs"}},
	)
	names := func(cs []Change) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.Name)
		}
		return strings.Join(s, ",")
	}
	if got := names(PartlyModelled(19, "iptables")); got != "a,b" {
		t.Errorf("1.19 iptables: %s", got)
	}
	if got := names(PartlyModelled(22, "ipvs")); got != "b,d" {
		t.Errorf("1.22 ipvs: %s", got)
	}
	if got := names(PartlyModelled(30, "iptables")); got != "" {
		t.Errorf("1.30: %s", got)
	}
}

// TestVersionsDoc: docs/VERSIONS.md is what the tables render (-update rewrites it).
func TestVersionsDoc(t *testing.T) {
	const path = "../docs/VERSIONS.md"
	want := VersionsMarkdown()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not what the tables render: run go test ./proxy -run TestVersionsDoc -update", path)
	}
}

// TestChangeTestsExist: the test each change names (package.TestName, a subtest after
// a slash) is a test function of that package in this repository, so docs/VERSIONS.md
// points at something that runs.
func TestChangeTestsExist(t *testing.T) {
	pkgRe := regexp.MustCompile(`(?m)^package (\w+)`)
	funcRe := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	have := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		m := pkgRe.FindSubmatch(src)
		if m == nil {
			return nil
		}
		pkg := strings.TrimSuffix(string(m[1]), "_test")
		for _, f := range funcRe.FindAllSubmatch(src, -1) {
			have[pkg+"."+string(f[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Changes() {
		if c.Test == "" {
			continue
		}
		name, _, _ := strings.Cut(c.Test, "/")
		if !have[name] {
			t.Errorf("change %s names test %s, which no package has", c.Name, c.Test)
		}
	}
}
