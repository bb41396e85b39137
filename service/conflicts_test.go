package service

import (
	"strings"
	"testing"
)

// TestValidateManifestsConflicts: a second object of one kind, namespace and name, and
// a second Service on a cluster IP, are errors naming both files and lines, as the API
// server refuses the second create (AlreadyExists; "provided IP is already
// allocated"). Before, dns serve and generate took both.
func TestValidateManifestsConflicts(t *testing.T) {
	a := "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 10.96.0.5, ports: [{port: 80}]}\n"
	b := "# b\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: default\nspec: {clusterIP: 10.96.0.6, ports: [{port: 80}]}\n" +
		"---\napiVersion: v1\nkind: Service\nmetadata: {name: other, namespace: x}\nspec:\n  clusterIP: fd00::7\n  clusterIPs: [fd00::7, 10.96.0.5]\n  ipFamilyPolicy: PreferDualStack\n  ports: [{port: 80}]\n" +
		"---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: x}\nspec: {clusterIP: None, ports: [{port: 80}]}\n" +
		"---\napiVersion: v1\nkind: Service\nmetadata: {name: headless2, namespace: x}\nspec: {clusterIP: None, ports: [{port: 80}]}\n" +
		"---\napiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: i}]}\n"
	var ms []Manifest
	for _, f := range []struct{ name, text string }{{"a.yaml", a}, {"b.yaml", b}} {
		got, err := Load(f.name, []byte(f.text))
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, got...)
	}
	err := ValidateManifests(ms)
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`b.yaml:5 (document 1 from line 2, Service "default/web"): metadata.name: Service "default/web" is defined twice (first at a.yaml:3): the API server refuses the second create: services "web" already exists`,
		`b.yaml:14 (document 2 from line 9, Service "x/other"): spec.clusterIPs[1]: Invalid value: "10.96.0.5": provided IP is already allocated (to Service "default/web" at a.yaml:4)`,
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
}

// TestIsJSON: text starting with '{' is JSON only when it is; a YAML flow mapping
// is YAML (so that its errors cite its lines), as kubectl's decoder falls back to
// YAML when the first value is not JSON; JSON with a mistake stays JSON, for its
// error.
func TestIsJSON(t *testing.T) {
	for text, want := range map[string]bool{
		`{"apiVersion": "v1"}`:                    true,
		"\n {\"a\": 1}\n{\"b\": 2}\n":             true,
		`{"a": 1,}`:                               true, // JSON with a mistake (its first key quoted)
		`{a: [}`:                                  true, // neither JSON nor YAML
		"{apiVersion: v1, kind: Service}":         false,
		"\n\n{apiVersion: v1,\n kind: Service}\n": false,
		"apiVersion: v1\n":                        false,
		"":                                        false,
		"{apiVersion: v1}\n---\n{kind: Service}\n": false,
	} {
		if got := IsJSON([]byte(text)); got != want {
			t.Errorf("IsJSON(%q) = %v, want %v", text, got, want)
		}
	}
}

// TestLoadFlowStyleLines: a flow-style manifest file cites its own lines (it was
// taken for JSON: "invalid JSON" at the first line, whatever the problem).
func TestLoadFlowStyleLines(t *testing.T) {
	text := "\n\n{apiVersion: v1, kind: Service,\n  metadata: {name: flow},\n  spec: {ports: [{port: 70000}]}}\n"
	ms, err := Load("flow.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	err = ValidateManifests(ms)
	want := `flow.yaml:5 (document 1 from line 3, Service "default/flow"): spec.ports[0].port: Invalid value: 70000`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %s", err, want)
	}
}
