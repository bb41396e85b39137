package service

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	yamlv3 "go.yaml.in/yaml/v3"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var update = flag.Bool("update", false, "rewrite golden files")

const manifestsDir = "../testdata/manifests"

// golden compares got with testdata/<name>, rewriting it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (run with -update to accept):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// summary prints one line per manifest: position and a few decoded fields.
func summary(ms []Manifest) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%s", m)
		switch o := m.Object.(type) {
		case *corev1.Service:
			fmt.Fprintf(&b, " type=%s clusterIP=%s ports=%d", o.Spec.Type, o.Spec.ClusterIP, len(o.Spec.Ports))
		case *corev1.Pod:
			fmt.Fprintf(&b, " node=%s podIP=%s deleting=%t", o.Spec.NodeName, o.Status.PodIP, o.DeletionTimestamp != nil)
		case *discoveryv1.EndpointSlice:
			fmt.Fprintf(&b, " %s endpoints=%d ports=%d", o.AddressType, len(o.Endpoints), len(o.Ports))
		case *corev1.Endpoints:
			fmt.Fprintf(&b, " subsets=%d", len(o.Subsets))
		case *corev1.Node:
			fmt.Fprintf(&b, " zone=%s", o.Labels[corev1.LabelTopologyZone])
		}
		gvk := m.Object.GetObjectKind().GroupVersionKind()
		fmt.Fprintf(&b, " [%s]\n", gvk.GroupVersion().String())
	}
	return b.String()
}

func TestLoadFixtures(t *testing.T) {
	for _, f := range []string{"kubectl-get-all.yaml", "shop.yaml", "dualstack.json", "selectorless-slices.yaml"} {
		t.Run(f, func(t *testing.T) {
			ms, err := LoadPaths(filepath.Join(manifestsDir, f))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "load/"+strings.TrimSuffix(f, filepath.Ext(f))+".golden", summary(ms))
		})
	}
}

func TestLoadPathsDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n")
	write("a.yml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
	write("c.json", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"c"}}`)
	write("notes.txt", "not a manifest")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("sub/d.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: d}\n")

	ms, err := LoadPaths(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ms {
		names = append(names, ObjectKey(m.Object)+"@"+filepath.Base(m.File))
	}
	if got, want := strings.Join(names, " "), "a@a.yml b@b.yaml c@c.json"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}

	// An explicitly named file is read whatever its extension; a bad file
	// anywhere means nothing is returned.
	write("bad.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: x, bogus: 1}\n")
	ms, err = LoadPaths(dir, filepath.Join(dir, "sub", "d.yaml"))
	if err == nil || ms != nil {
		t.Fatalf("got %d manifests, err %v; want an error and nothing", len(ms), err)
	}
	if !strings.Contains(err.Error(), `bad.yaml:3 (document 1 from line 1, Namespace "x"): unknown field "metadata.bogus"`) {
		t.Errorf("error %q does not name the file, line and field", err)
	}
	if _, err := LoadPaths(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("missing file: no error")
	}
}

func TestLoadDocuments(t *testing.T) {
	ns := func(name string) string { return "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + name + "\n" }
	item := func(doc string) string { return strings.ReplaceAll(strings.TrimSuffix(doc, "\n"), "\n", "\n  ") + "\n" }
	tests := []struct {
		name string
		in   string
		want string // "name@doc:line[#item]" per manifest
	}{
		{"single", ns("a"), "a@0:1"},
		{"leading marker and comment", "# hi\n---\n" + ns("a"), "a@0:3"},
		{"two docs", ns("a") + "---\n" + ns("b"), "a@0:1 b@1:6"},
		{"trailing marker", ns("a") + "---\n", "a@0:1"},
		{"empty document counts", ns("a") + "---\n---\n" + ns("b"), "a@0:1 b@2:7"},
		{"comment-only document counts", ns("a") + "---\n# nothing\n---\n" + ns("b"), "a@0:1 b@2:8"},
		{"end marker", ns("a") + "...\n---\n" + ns("b"), "a@0:1 b@1:7"},
		{"marker with comment", ns("a") + "--- # next\n" + ns("b"), "a@0:1 b@1:6"},
		{"content after marker", "--- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n", "a@0:1"},
		{"crlf", strings.ReplaceAll(ns("a")+"---\n"+ns("b"), "\n", "\r\n"), "a@0:1 b@1:6"},
		{"bom", "\ufeff" + ns("a"), "a@0:1"},
		{"indented content after comments", "\n\n# c\n" + ns("a"), "a@0:4"},
		{"list", "apiVersion: v1\nkind: List\nitems:\n- " + item(ns("a")) + "- " + item(ns("b")), "a@0:4#1 b@0:8#2"},
		{"typed list without item kinds", "apiVersion: v1\nkind: NamespaceList\nitems:\n- metadata: {name: a}\n- metadata: {name: b}\n", "a@0:4#1 b@0:5#2"},
		{"json", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}`, "a@0:1"},
		{"json stream", "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\n\"metadata\":{\"name\":\"a\"}}\n\n{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"b\"}}", "a@0:1 b@1:4"},
		{"json list", "{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[\n{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"a\"}},\n{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"b\"}}]}", "a@0:2#1 b@0:3#2"},
		{"empty file", "", ""},
		{"only comments", "# nothing here\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := Load("x.yaml", []byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range ms {
				s := fmt.Sprintf("%s@%d:%d", ObjectKey(m.Object), m.Doc, m.Line)
				if m.Item > 0 {
					s += fmt.Sprintf("#%d", m.Item)
				}
				if m.File != "x.yaml" {
					t.Errorf("File = %q", m.File)
				}
				got = append(got, s)
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("got %q, want %q", g, tt.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	svc := "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: default\nspec:\n  ports:\n  - port: 80\n"
	tests := []struct {
		name string
		in   string
		want []string // each must appear in the error text
	}{
		{"unknown field", svc + "    portt: 81\n",
			[]string{`x.yaml:9 (document 1 from line 1, Service "default/web"): unknown field "spec.ports[0].portt"`}},
		{"unknown field in second document", "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n" + svc + "  bogus: true\n",
			[]string{`x.yaml:13 (document 2 from line 5, Service "default/web"): unknown field "spec.bogus"`}},
		{"several unknown fields", svc + "    a: 1\n    b: 2\n",
			[]string{`x.yaml:9 (document 1 from line 1, Service "default/web"): unknown field "spec.ports[0].a"`, `x.yaml:10 (document 1 from line 1, Service "default/web"): unknown field "spec.ports[0].b"`}},
		{"wrong type with index", svc + "  - port: http\n",
			[]string{`x.yaml:9 (document 1 from line 1, Service "default/web"): spec.ports[1].port: Invalid value: "http": got string, expected int32`}},
		{"yaml 1.1 boolean label", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  labels:\n    ok: \"yes\"\n    enabled: yes\n",
			[]string{`x.yaml:7 (document 1 from line 1, Namespace "a"): metadata.labels[enabled]: Invalid value: "yes": got bool, expected string`}},
		{"duplicate key", svc + "  selector:\n    app: a\n    app: b\n",
			[]string{`x.yaml:11 (document 1 from line 1): invalid YAML:`, `line 11: key "app" already set in map`}},
		{"syntax error", "apiVersion: v1\nkind: Service\nmetadata:\n  name: [a\n",
			[]string{`x.yaml:`, `(document 1`, `invalid YAML: yaml: line`}},
		{"unknown kind", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
			[]string{`x.yaml:2 (document 1 from line 1): unknown kind "Deployment" (apiVersion "apps/v1"); clusterlab reads discovery.k8s.io/v1 EndpointSlice, networking.k8s.io/v1 NetworkPolicy, v1 Endpoints`}},
		{"wrong version", "apiVersion: discovery.k8s.io/v1beta1\nkind: EndpointSlice\nmetadata: {name: s}\naddressType: IPv4\n",
			[]string{`unknown kind "EndpointSlice" (apiVersion "discovery.k8s.io/v1beta1")`}},
		{"missing kind", "apiVersion: v1\nmetadata: {name: a}\n",
			[]string{`x.yaml:1 (document 1): kind: Required value`}},
		{"missing apiVersion", "kind: Service\nmetadata: {name: a}\n",
			[]string{`x.yaml:1 (document 1): apiVersion: Required value`}},
		{"not an object", "- a\n- b\n", []string{`x.yaml:1 (document 1): expected an object with apiVersion and kind, found a list`}},
		{"scalar document", "hello\n", []string{`found a string`}},
		{"bad list item", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n  metadata: {name: a}\n- apiVersion: v1\n  kind: Namespace\n  metadata: {name: b}\n  spec: {bogus: 1}\n",
			[]string{`x.yaml:10 (document 1, item 2 from line 7, Namespace "b"): unknown field "spec.bogus"`}},
		{"unknown list field", "apiVersion: v1\nkind: List\nitem: []\n", []string{`unknown field "item"`}},
		{"bad json", "{\"apiVersion\": \"v1\",\n\"kind\": }", []string{`x.yaml:2 (document 1): invalid JSON`}},
		{"json unknown field", "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\n\"metadata\":{\"name\":\"a\",\n\"nam\":\"b\"}}", []string{`x.yaml:3 (document 1 from line 1, Namespace "a"): unknown field "metadata.nam"`}},
		{"errors from every document", "kind: X\n---\nkind: Y\n", []string{`x.yaml:1 (document 1)`, `x.yaml:3 (document 2)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := Load("x.yaml", []byte(tt.in))
			if err == nil {
				t.Fatalf("no error; got %d manifests", len(ms))
			}
			if ms != nil {
				t.Errorf("got %d manifests with the error; want none", len(ms))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n  %s\ndoes not contain\n  %s", err, w)
				}
			}
			var me *ManifestError
			if !errors.As(err, &me) {
				t.Errorf("error %T is not a *ManifestError", err)
			}
		})
	}
}

func TestManifestAnnotate(t *testing.T) {
	text := "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n  - name: http\n    port: 80\n  - name: http\n    port: 0\n"
	ms, err := Load("svc.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0]
	el := field.ErrorList{
		field.Invalid(field.NewPath("spec", "ports").Index(1).Child("port"), 0, "must be between 1 and 65535, inclusive"),
		field.Duplicate(field.NewPath("spec", "ports").Index(1).Child("name"), "http"),
		field.Required(field.NewPath("spec", "selector"), ""),
	}
	want := []string{
		`svc.yaml:10 (document 1 from line 1, Service "default/web"): spec.ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive`,
		`svc.yaml:9 (document 1 from line 1, Service "default/web"): spec.ports[1].name: Duplicate value: "http"`,
		`svc.yaml:5 (document 1 from line 1, Service "default/web"): spec.selector: Required value`,
	}
	check := func(name string, err error) {
		t.Helper()
		got := strings.Split(err.Error(), "\n")
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
	}
	check("AnnotateFields", m.AnnotateFields(el))
	check("Annotate(aggregate)", m.Annotate(el.ToAggregate()))
	status := apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Service").GroupKind(), "web", el)
	annotated := m.Annotate(fmt.Errorf("creating: %w", status))
	check("Annotate(status)", annotated)
	if !apierrors.IsInvalid(annotated) {
		t.Error("annotated 422 no longer IsInvalid")
	}
	if m.Annotate(nil) != nil {
		t.Error("Annotate(nil) != nil")
	}
	if got := m.Annotate(errors.New("boom")).Error(); got != `svc.yaml:1 (document 1, Service "default/web"): boom` {
		t.Errorf("plain error: %q", got)
	}
}

func TestParsePath(t *testing.T) {
	got := fmt.Sprint(parsePath("metadata.labels[app.kubernetes.io/name].x[3]"))
	if want := "[{metadata false} {labels false} {app.kubernetes.io/name true} {x false} {3 true}]"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// aliasBomb is a document whose aliases expand it from about 20 KB of text
// to 60 MB: every alias of the second level repeats the 10 000-character
// string 30 times.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n  annotations:\n")
	b.WriteString("    s: &s " + strings.Repeat("x", 10000) + "\n")
	b.WriteString("    l1: &l1 [" + strings.TrimSuffix(strings.Repeat("*s, ", 30), ", ") + "]\n")   // line 7
	b.WriteString("    l2: &l2 [" + strings.TrimSuffix(strings.Repeat("*l1, ", 200), ", ") + "]\n") // line 8
	return b.String()
}

func TestLoadRefusesAliasExpansion(t *testing.T) {
	nested := "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n" +
		"a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
	for i := 1; i <= 9; i++ {
		nested += fmt.Sprintf("a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	for _, tc := range []struct {
		name, text string
		line       int
		alias      string
	}{
		{"long string", aliasBomb(), 8, "*l1"},
		// 10^10 "lol"s; a5 (line 10) alone is 10^5 of them, 4 M nodes and
		// characters, past the limit at its third alias.
		{"billion laughs", "# c\n" + nested, 10, "*a4"},
		{"after a document", "apiVersion: v1\nkind: Namespace\nmetadata: {name: z}\n---\n" + aliasBomb(), 12, "*l1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := Load("bomb.yaml", []byte(tc.text))
			if err == nil || ms != nil {
				t.Fatalf("got %d manifests and error %v, want an error and nothing", len(ms), err)
			}
			var me *ManifestError
			if !errors.As(err, &me) {
				t.Fatalf("error %T is not a *ManifestError: %v", err, err)
			}
			if me.File != "bomb.yaml" || me.Line != tc.line {
				t.Errorf("error at %s:%d, want bomb.yaml:%d: %v", me.File, me.Line, tc.line, err)
			}
			for _, want := range []string{fmt.Sprintf("bomb.yaml:%d ", tc.line), "invalid YAML: alias " + tc.alias + " makes the document expand to more than"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// Aliases that stay within the limit still work, and positions of fields
// under an alias are those of the anchor's text.
func TestLoadAllowsSmallAliases(t *testing.T) {
	text := `apiVersion: v1
kind: Service
metadata:
  name: web
  labels: &labels {app: web, tier: front}
spec:
  selector: *labels
  ports:
  - &p {name: http, port: 80, targetPort: 8080, protocol: TCP}
---
apiVersion: v1
kind: Namespace
metadata:
  name: big
  annotations:
    s: &s ` + strings.Repeat("x", 1000) + `
spec:
  finalizers: [` + strings.TrimSuffix(strings.Repeat("*s, ", 500), ", ") + `]
`
	ms, err := Load("ok.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("got %d manifests, want 2", len(ms))
	}
	svc := ms[0].Object.(*corev1.Service)
	if svc.Spec.Selector["tier"] != "front" || svc.Spec.Ports[0].Port != 80 {
		t.Errorf("aliases not expanded: %+v", svc.Spec)
	}
	if got := ms[0].FieldLine("spec.selector"); got != 7 {
		t.Errorf("spec.selector at line %d, want 7", got)
	}
	ns := ms[1].Object.(*corev1.Namespace)
	if len(ns.Spec.Finalizers) != 500 || len(ns.Spec.Finalizers[499]) != 1000 {
		t.Errorf("got %d finalizers, want 500 of 1000 characters", len(ns.Spec.Finalizers))
	}
}

// The expansion is measured without expanding: 2^40 copies of a scalar are
// counted exactly, in work linear in the size of the text.
func TestExpansionWeight(t *testing.T) {
	text := "a0: &a0 xy\n"
	for i := 1; i <= 40; i++ {
		text += fmt.Sprintf("a%d: &a%d [*a%d, *a%d]\n", i, i, i-1, i-1)
	}
	var root yamlv3.Node
	if err := yamlv3.Unmarshal([]byte(text), &root); err != nil {
		t.Fatal(err)
	}
	tree := root.Content[0]
	// Level i is a sequence of two copies of level i-1: w(0) = 3 ("xy"
	// and the node), w(i) = 1 + 2 w(i-1); each key adds 1 + len(key).
	want, w := 1, 3 // the mapping; level 0
	want += 1 + 2 + w
	for i := 1; i <= 40; i++ {
		w = 1 + 2*w
		want += 1 + len(fmt.Sprintf("a%d", i)) + w
	}
	if got := expansionWeight(tree, true); got != want {
		t.Errorf("expanded weight %d, want %d", got, want)
	}
	plain := 1 + (1 + 2 + 3)
	for i := 1; i <= 40; i++ {
		plain += 1 + len(fmt.Sprintf("a%d", i)) + 3
	}
	if got := expansionWeight(tree, false); got != plain {
		t.Errorf("plain weight %d, want %d", got, plain)
	}
	alias, limit := aliasExpansionTooBig(tree)
	if alias == nil || alias.Kind != yamlv3.AliasNode || limit != plain+minAliasAllowance {
		t.Fatalf("too big at %+v, limit %d; want an alias and limit %d", alias, limit, plain+minAliasAllowance)
	}
	// Levels up to a17 add up to about 2^20: the alias is one of a17's
	// or a18's, the first levels past the limit.
	if alias.Value != "a17" && alias.Value != "a18" {
		t.Errorf("too big at *%s (line %d), want *a17 or *a18", alias.Value, alias.Line)
	}
}

// FuzzLoad: the loader never panics, and either returns objects with a
// position or an error with nothing.
func FuzzLoad(f *testing.F) {
	entries, err := os.ReadDir(manifestsDir)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(manifestsDir, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n- kind: Service\n  apiVersion: v1\n  metadata: {name: a}\n"))
	f.Add([]byte("--- &a\napiVersion: v1\nkind: Namespace\nmetadata: *a\n"))
	f.Add([]byte(`{"kind":"ServiceList","items":[{"metadata":{"name":"x"},"spec":{"ports":[{"port":"x"}]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		// A hang becomes a crash, so that the fuzzer writes the input
		// into testdata/fuzz instead of stalling.
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("Load hangs on %q", data)) })
		defer watchdog.Stop()
		ms, err := Load("fuzz.yaml", data)
		if err != nil {
			if ms != nil {
				t.Fatalf("error %v with %d manifests", err, len(ms))
			}
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		for _, m := range ms {
			if m.Object == nil || KindOf(m.Object) == "" {
				t.Fatalf("manifest without a supported object: %+v", m)
			}
			if m.Line < 1 || m.Doc < 0 || m.File != "fuzz.yaml" {
				t.Fatalf("bad position: %+v", m)
			}
			_ = m.String()
			_ = m.FieldLine("spec.ports[0].port")
		}
	})
}
