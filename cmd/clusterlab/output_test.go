package main

import (
	"encoding/json"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestOutputYAML: every command with -o json takes -o yaml and prints the same document
// in YAML; another value is bad input naming the three.
func TestOutputYAML(t *testing.T) {
	for _, args := range [][]string{
		{"run", "../../testdata/scenarios/quickstart.yaml"},
		{"ipvs", "--restore", "../../testdata/ipvs/kube-proxy.sn", "--script", "../../testdata/ipvs/tour.script"},
		{"kernel", "check"},
	} {
		t.Run(args[0], func(t *testing.T) {
			js, _, err := runCmd(t, append(args, "-o", "json")...)
			if err != nil {
				t.Fatalf("-o json: %v", err)
			}
			ys, _, err := runCmd(t, append(args, "-o", "yaml")...)
			if err != nil {
				t.Fatalf("-o yaml: %v", err)
			}
			if strings.HasPrefix(strings.TrimSpace(ys), "{") {
				t.Fatalf("-o yaml printed JSON:\n%.200s", ys)
			}
			var fromJSON, fromYAML any
			if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal([]byte(ys), &fromYAML); err != nil {
				t.Fatalf("-o yaml does not parse: %v", err)
			}
			if args[0] == "kernel" {
				return // the kernel's state may differ between the two calls (nothing to compare field by field)
			}
			if !reflect.DeepEqual(fromJSON, fromYAML) {
				t.Errorf("-o yaml is not -o json's document")
			}
		})
	}
	_, _, err := runCmd(t, "run", "../../testdata/scenarios/quickstart.yaml", "-o", "xml")
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), `-o "xml": want text, json or yaml`) {
		t.Errorf("-o xml: %v", err)
	}
}

// TestVersion: --version names the module version, the VCS revision (dirty when the
// tree had changes) with its time, and the Go version; a binary without build
// information says so.
func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "4cf5ba4a84"}, {Key: "vcs.time", Value: "2026-11-27T13:09:21Z"}, {Key: "vcs.modified", Value: "true"},
		{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"},
	}}
	if got, want := versionString(bi, true), "clusterlab v0.3.0, revision 4cf5ba4a84+dirty (2026-11-27T13:09:21Z), go1.26.8, linux/amd64"; got != want {
		t.Errorf("version %q, want %q", got, want)
	}
	if got := versionString(nil, false); got != "clusterlab (no build information)" {
		t.Errorf("no build info: %q", got)
	}
	out, _, err := runCmd(t, "--version")
	if err != nil || !strings.HasPrefix(out, "clusterlab ") || !strings.Contains(out, "go1.") {
		t.Errorf("--version: %q %v", out, err)
	}
}
