package scenario

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sjson "sigs.k8s.io/json"
	sigyaml "sigs.k8s.io/yaml"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/service"
)

// loaded is what a manifests list turns into: objects for the store, and the workloads
// (Deployments, ReplicaSets) whose pods are among the objects.
type loaded struct {
	objects   []runtime.Object
	workloads []*workload
	origin    map[string]string // "Kind ns/name" → where it was defined (for duplicates)
	// rejectionExpected: an apply step expects the API server to reject these objects,
	// so Services are left for it to validate when the step runs.
	rejectionExpected bool
	// conflicts finds a second object of a kind, namespace and name, and a second
	// Service on a cluster IP, with the messages of dns serve and generate.
	conflicts service.Conflicts
	// apiServer, when set, is a scratch API server configured as the run's, in which
	// the Services are created as they are loaded: defaulted and allocated before they
	// are validated, as kube-apiserver does (see newDryRun).
	apiServer *service.Store
}

// newDryRun returns a list of manifests to load, with a scratch API server configured
// as the run's (service CIDRs, node port range, default/kubernetes at the first
// service address): a Service is defaulted, given its cluster IPs, node ports and
// health-check node port, and only then validated, as kube-apiserver does, so fields
// the API server fills in need not be written, and an allocation that fails (a node
// port out of range or taken by another manifest, a cluster IP outside the range) is
// an error at the manifest's line. Without a usable configuration (an error reported
// elsewhere) Services are validated on their own.
//
// With kubeDNS (cluster.dns kube-dns) the scratch API server also holds the
// kube-system/kube-dns Service the run installs before the manifests, at the tenth
// service address, so a manifest that asks for that address is told it is taken.
func newDryRun(cfg cluster.Config, kubeDNS bool) *loaded {
	st, err := service.NewStore(service.Config{ServiceCIDRs: cfg.ServiceCIDRs, NodePortRange: cfg.NodePortRange, Seed: cfg.Seed, MasterService: true})
	if err != nil {
		return &loaded{}
	}
	if kubeDNS {
		ip := nthIP(st.Config().ServiceCIDRs[0].Masked().Addr(), 10).String()
		dnsSvc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-dns"},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Selector: map[string]string{"k8s-app": "kube-dns"},
				Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP}}},
		}
		if _, err := st.Create(dnsSvc); err != nil {
			return &loaded{}
		}
	}
	return &loaded{apiServer: st}
}

// workload is a Deployment or ReplicaSet expanded into pods, as its controllers would.
type workload struct {
	kind      string // Deployment or ReplicaSet
	namespace string
	name      string
	rsName    string // the ReplicaSet whose pods these are (name-<pod-template-hash> for a Deployment)
	template  corev1.PodTemplateSpec
	replicas  int
	rng       *rand.Rand
	pods      []string // pod names, oldest first
	used      map[string]bool
	initial   []*corev1.Pod // the pods made when it was loaded
}

func (w *workload) key() string { return w.namespace + "/" + w.name }

// podNameAlphabet is the alphabet of Kubernetes' generated name suffixes (no vowels, no
// look-alike digits), as in k8s.io/apimachinery/pkg/util/rand.
const podNameAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// newPod makes the next pod of the workload: rsName-xxxxx with the template's labels and
// spec, owned by the ReplicaSet.
func (w *workload) newPod() *corev1.Pod {
	var name string
	for {
		b := make([]byte, 5)
		for i := range b {
			b[i] = podNameAlphabet[w.rng.IntN(len(podNameAlphabet))]
		}
		name = w.rsName + "-" + string(b)
		if !w.used[name] {
			break
		}
	}
	w.used[name] = true
	w.pods = append(w.pods, name)
	t := w.template.DeepCopy()
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: w.namespace,
			Labels: t.Labels, Annotations: t.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: w.rsName, UID: w.uid(), Controller: ptrTrue()}},
		},
		Spec: t.Spec,
	}
	return pod
}

// uid is a stable UID for the workload's ReplicaSet, derived from its name.
func (w *workload) uid() types.UID {
	h := fnv.New64a()
	h.Write([]byte(w.namespace + "/" + w.rsName))
	x := h.Sum64()
	return types.UID(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(x>>32), uint16(x>>16), uint16(x)&0xfff, uint16(x>>4)&0xfff, x&0xffffffffffff))
}

func ptrTrue() *bool { b := true; return &b }

// podTemplateHash is the pod-template-hash label a Deployment gives its ReplicaSet: an
// FNV-32a hash of the template, spelled in the name alphabet as Kubernetes spells it.
func podTemplateHash(t *corev1.PodTemplateSpec) string {
	h := fnv.New32a()
	b, _ := json.Marshal(t)
	h.Write(b)
	digits := strconv.FormatUint(uint64(h.Sum32()), 10)
	out := make([]byte, len(digits))
	for i := range digits {
		out[i] = podNameAlphabet[int(digits[i])%len(podNameAlphabet)]
	}
	return string(out)
}

// manifestSource is one text to load: a file, or an inline object cut out of the
// scenario file (padded so that its lines are the scenario file's lines).
type manifestSource struct {
	file   string // name for messages
	data   []byte
	inline bool
	entry  string // the scenario field of the entry ("manifests[2]")
	// flowLine is the line of an inline object written in flow style ({kind: Pod, ...}):
	// its text is marshalled anew, so its errors' lines are the object's own.
	flowLine int
}

// loadManifests loads a manifests list (the top-level one, or an apply step's).
func (s *Scenario) loadManifests(list []Manifest, path string, seed uint64, into *loaded) error {
	var errs []error
	for i, m := range list {
		entry := fmt.Sprintf("%s[%d]", path, i)
		var srcs []manifestSource
		switch {
		case m.Object != nil:
			data, marshalled, err := s.inlineText(m)
			if err != nil {
				errs = append(errs, s.errorf(entry, "%v", err))
				continue
			}
			src := manifestSource{file: s.File, data: data, inline: true, entry: entry}
			if marshalled && m.Object.Style&yaml.FlowStyle != 0 {
				src.flowLine = m.Object.Line
			}
			srcs = append(srcs, src)
		case m.Path != "":
			files, err := s.manifestFiles(m.Path)
			if err != nil {
				errs = append(errs, s.errorf(entry+".path", "%v", err))
				continue
			}
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					errs = append(errs, s.errorf(entry+".path", "%s: %s", f, cleanOSError(err)))
					continue
				}
				srcs = append(srcs, manifestSource{file: f, data: data, entry: entry + ".path"})
			}
		default:
			errs = append(errs, s.errorf(entry, "want `path: FILE` or an inline object"))
			continue
		}
		for _, src := range srcs {
			if err := s.loadSource(src, seed, into); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// manifestFiles lists the files of a manifests path (relative to the scenario).
func (s *Scenario) manifestFiles(p string) ([]string, error) {
	if !filepath.IsAbs(p) && s.Dir != "" {
		p = filepath.Join(s.Dir, p)
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", p, cleanOSError(err))
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", p, cleanOSError(err))
	}
	var out []string
	for _, e := range ents {
		switch strings.ToLower(filepath.Ext(e.Name())); {
		case e.IsDir():
		case strings.HasSuffix(e.Name(), ".yaml"), strings.HasSuffix(e.Name(), ".yml"), strings.HasSuffix(e.Name(), ".json"):
			out = append(out, filepath.Join(p, e.Name()))
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no *.yaml, *.yml or *.json files in the directory", p)
	}
	return out, nil
}

// inlineText returns the text of an inline object with the scenario file's line
// numbers: the object's lines cut out of the file, dedented, after as many empty lines
// as precede it; a flow-style object ({kind: Pod, ...}) keeps its columns too. Without
// the file's text (a scenario built in Go) the object is marshalled (marshalled true:
// its lines are not the file's).
func (s *Scenario) inlineText(m Manifest) (text []byte, marshalled bool, err error) {
	n := m.Object
	marshal := func() ([]byte, bool, error) {
		b, err := yaml.Marshal(blockStyle(n))
		if err != nil {
			return nil, true, err
		}
		if n.Line > 1 {
			b = append([]byte(strings.Repeat("\n", n.Line-1)), b...)
		}
		return b, true, nil
	}
	if len(s.src) == 0 || n.Line == 0 || n.Column == 0 {
		return marshal()
	}
	lines := strings.SplitAfter(string(s.src), "\n")
	start := n.Line - 1
	if start >= len(lines) {
		return marshal()
	}
	if n.Style&yaml.FlowStyle != 0 {
		if b, ok := flowText(lines, start, n.Column-1); ok {
			return b, false, nil
		}
		return marshal()
	}
	col := n.Column - 1
	var b strings.Builder
	b.WriteString(strings.Repeat("\n", start))
	for i := start; i < len(lines); i++ {
		ln := lines[i]
		body := strings.TrimRight(ln, "\r\n")
		if i == start {
			if len(body) < col {
				return marshal()
			}
			b.WriteString(body[col:])
			b.WriteString("\n")
			continue
		}
		trimmed := strings.TrimSpace(body)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			b.WriteString("\n")
			continue
		}
		indent := len(body) - len(strings.TrimLeft(body, " "))
		if indent < col {
			break
		}
		b.WriteString(body[col:])
		b.WriteString("\n")
	}
	return []byte(b.String()), false, nil
}

// flowText cuts a flow-style mapping out of the file's lines: from column col of line
// start to the line where it closes, after start empty lines and col spaces, so that
// its lines and columns are the file's. ok is false when no closing is found within
// a bounded number of lines.
func flowText(lines []string, start, col int) ([]byte, bool) {
	first := strings.TrimRight(lines[start], "\r\n")
	if len(first) < col {
		return nil, false
	}
	var b strings.Builder
	b.WriteString(strings.Repeat("\n", start))
	b.WriteString(strings.Repeat(" ", col))
	b.WriteString(first[col:])
	b.WriteString("\n")
	for i := start + 1; ; i++ {
		var root yaml.Node
		if yaml.Unmarshal([]byte(b.String()), &root) == nil && root.Kind == yaml.DocumentNode &&
			len(root.Content) == 1 && root.Content[0].Kind == yaml.MappingNode {
			return []byte(b.String()), true
		}
		if i >= len(lines) || i-start > 2000 {
			return nil, false
		}
		b.WriteString(strings.TrimRight(lines[i], "\r\n"))
		b.WriteString("\n")
	}
}

// blockStyle returns a copy of n without flow style (so that it marshals as block YAML,
// which service.Load does not mistake for JSON).
func blockStyle(n *yaml.Node) *yaml.Node {
	c := *n
	c.Style &^= yaml.FlowStyle
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, x := range n.Content {
		c.Content[i] = blockStyle(x)
	}
	return &c
}

var docMarker = regexp.MustCompile(`^---([ \t].*)?$`)

// loadSource loads one text: apps/v1 Deployments and ReplicaSets are expanded here, the
// other documents go to service.Load (with the apps documents blanked, so that lines and
// document numbers stay right). Every object is defaulted and validated.
func (s *Scenario) loadSource(src manifestSource, seed uint64, into *loaded) error {
	data := src.data
	var errs []error
	if !service.IsJSON(data) {
		lines := strings.SplitAfter(string(data), "\n")
		docStart := 0
		flush := func(end int) {
			if end <= docStart {
				return
			}
			text := strings.Join(lines[docStart:end], "")
			var root yaml.Node
			if err := yaml.Unmarshal([]byte(text), &root); err != nil || root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
				return // service.Load reports it
			}
			doc := root.Content[0]
			kind, apiVersion := scalarChild(doc, "kind"), scalarChild(doc, "apiVersion")
			if kind != "Deployment" && kind != "ReplicaSet" {
				return
			}
			shift(doc, docStart)
			if apiVersion != "apps/v1" {
				errs = append(errs, s.manifestErr(src, doc.Line, "apiVersion", fmt.Sprintf("%s: want apiVersion apps/v1, got %q", kind, apiVersion)))
			} else if err := s.expandWorkload(src, kind, text, doc, seed, into); err != nil {
				errs = append(errs, err)
			}
			for i := docStart; i < end; i++ {
				if !docMarker.MatchString(strings.TrimRight(lines[i], "\r\n")) {
					lines[i] = "\n"
				}
			}
		}
		for i, ln := range lines {
			if docMarker.MatchString(strings.TrimRight(ln, "\r\n")) {
				flush(i)
				docStart = i
			}
		}
		flush(len(lines))
		data = []byte(strings.Join(lines, ""))
	}
	ms, err := service.Load(src.file, data)
	if err != nil {
		errs = append(errs, s.wrapManifestErrs(src, err))
	}
	for _, m := range ms {
		if acc, err := meta.Accessor(m.Object); err == nil && acc.GetNamespace() == "" && service.IsNamespaced(service.KindOf(m.Object)) {
			acc.SetNamespace("default")
		}
		if !into.rejectionExpected {
			// The checks of dns serve and generate (service.ValidateManifests), with
			// their messages, before the scratch API server's own.
			if err := into.conflicts.Check(m); err != nil {
				errs = append(errs, s.wrapManifestErrs(src, err))
				continue
			}
		}
		if _, isSvc := m.Object.(*corev1.Service); isSvc && (into.rejectionExpected || into.apiServer != nil) {
			if err := into.dryRunService(m); err != nil {
				errs = append(errs, s.wrapManifestErrs(src, m.Annotate(err)))
				continue
			}
			if err := into.add(m.Object, m.String()); err != nil {
				errs = append(errs, s.wrapManifestErrs(src, m.Annotate(err)))
			}
			continue
		}
		if el := validateObject(m.Object); len(el) > 0 {
			errs = append(errs, s.wrapManifestErrs(src, m.AnnotateFields(el)))
			continue
		}
		if err := into.add(m.Object, m.String()); err != nil {
			errs = append(errs, s.wrapManifestErrs(src, m.Annotate(err)))
		}
	}
	return errors.Join(errs...)
}

func validateObject(obj runtime.Object) field.ErrorList {
	c := obj.DeepCopyObject()
	if svc, ok := c.(*corev1.Service); ok && len(svc.Spec.ClusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		// The API server fills clusterIPs from clusterIP before it validates.
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	}
	service.Default(c)
	if svc, ok := c.(*corev1.Service); ok && service.NeedsHealthCheck(svc) && svc.Spec.HealthCheckNodePort == 0 {
		// The API server allocates the health-check node port before it validates; a
		// placeholder stands for it here, where no scratch API server allocates it
		// (newDryRun: the cluster's configuration has errors of its own).
		svc.Spec.HealthCheckNodePort = 1
	}
	return service.Validate(c)
}

// dryRunService creates a Service in the scratch API server (see newDryRun). A
// rejection the apply step expects is left for the run.
func (l *loaded) dryRunService(m service.Manifest) error {
	if l.rejectionExpected || l.apiServer == nil {
		return nil
	}
	if prev, dup := l.origin[service.KindOf(m.Object)+" "+service.ObjectKey(m.Object)]; dup {
		return fmt.Errorf("%s %q is defined twice (first at %s)", service.KindOf(m.Object), service.ObjectKey(m.Object), prev)
	}
	err := l.apiServer.Apply(m.Object)
	return err
}

func (l *loaded) add(obj runtime.Object, where string) error {
	if err := l.claim(obj, where); err != nil {
		return err
	}
	l.objects = append(l.objects, obj)
	return nil
}

// claim records that an object is defined (at where), failing on a second definition.
func (l *loaded) claim(obj runtime.Object, where string) error {
	k := service.KindOf(obj) + " " + service.ObjectKey(obj)
	if prev, dup := l.origin[k]; dup {
		return fmt.Errorf("%s %q is defined twice (first at %s)", service.KindOf(obj), service.ObjectKey(obj), prev)
	}
	if l.origin == nil {
		l.origin = map[string]string{}
	}
	l.origin[k] = where
	return nil
}

// wrapManifestErrs turns manifest errors into scenario errors: inline objects' errors
// become the scenario file's (file:line: manifests[i]: ...); a file's errors keep their
// own file:line and gain the scenario entry that named the file.
func (s *Scenario) wrapManifestErrs(src manifestSource, err error) error {
	var out []error
	for _, e := range flatten(err) {
		var me *service.ManifestError
		if errors.As(e, &me) {
			if src.inline {
				msg := me.Msg
				if me.Object != "" {
					msg = me.Object + ": " + msg
				}
				line := me.Line
				if src.flowLine > 0 {
					line = src.flowLine
				}
				out = append(out, &Error{File: s.File, Line: line, Field: src.entry, Msg: msg})
			} else {
				out = append(out, &Error{File: s.File, Line: s.lineOf(src.entry), Field: src.entry, Msg: me.Error()})
			}
			continue
		}
		if se, ok := e.(*Error); ok {
			out = append(out, se)
			continue
		}
		out = append(out, &Error{File: s.File, Line: s.lineOf(src.entry), Field: src.entry, Msg: e.Error()})
	}
	return errors.Join(out...)
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// manifestErr is an error about a field of an apps object at a line.
func (s *Scenario) manifestErr(src manifestSource, line int, fieldPath, msg string) error {
	if src.inline {
		return &Error{File: s.File, Line: line, Field: src.entry, Msg: msg}
	}
	return &Error{File: s.File, Line: s.lineOf(src.entry), Field: src.entry, Msg: fmt.Sprintf("%s:%d: %s", src.file, line, msg)}
}

// expandWorkload decodes a Deployment or ReplicaSet strictly and makes its pods.
func (s *Scenario) expandWorkload(src manifestSource, kind, text string, doc *yaml.Node, seed uint64, into *loaded) error {
	// The same bound on alias expansion as service.Load's: a few aliases of a long string
	// would otherwise turn a small file into gigabytes of JSON.
	if ae := service.CheckAliasExpansion(doc); ae != nil {
		return s.manifestErr(src, ae.Line, "", kind+": invalid YAML: "+ae.Error())
	}
	j, err := sigyaml.YAMLToJSONStrict([]byte(text))
	if err != nil {
		return s.manifestErr(src, doc.Line, "", kind+": invalid YAML: "+err.Error())
	}
	var meta metav1.ObjectMeta
	var spec struct {
		Replicas *int32
		Selector *metav1.LabelSelector
		Template corev1.PodTemplateSpec
	}
	var strictErrs []error
	switch kind {
	case "Deployment":
		var d appsv1.Deployment
		strictErrs, err = sjson.UnmarshalStrict(j, &d)
		meta, spec.Replicas, spec.Selector, spec.Template = d.ObjectMeta, d.Spec.Replicas, d.Spec.Selector, d.Spec.Template
	default:
		var r appsv1.ReplicaSet
		strictErrs, err = sjson.UnmarshalStrict(j, &r)
		meta, spec.Replicas, spec.Selector, spec.Template = r.ObjectMeta, r.Spec.Replicas, r.Spec.Selector, r.Spec.Template
	}
	if err != nil {
		return s.manifestErr(src, doc.Line, "", fmt.Sprintf("%s: %v", kind, err))
	}
	var errs []error
	for _, se := range strictErrs {
		p := ""
		if m := regexp.MustCompile(`"([^"]+)"`).FindStringSubmatch(se.Error()); m != nil {
			p = m[1]
		}
		errs = append(errs, s.manifestErr(src, nodeLine(doc, p), p, fmt.Sprintf("%s: %s", kind, strings.TrimPrefix(se.Error(), "json: "))))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	ns := meta.Namespace
	if ns == "" {
		ns = "default"
	}
	what := fmt.Sprintf("%s %q", kind, ns+"/"+meta.Name)
	fail := func(p, msg string) error {
		return s.manifestErr(src, nodeLine(doc, p), p, what+": "+p+": "+msg)
	}
	if meta.Name == "" {
		return fail("metadata.name", "Required value")
	}
	replicas := 1
	if spec.Replicas != nil {
		replicas = int(*spec.Replicas)
	}
	if replicas < 0 || replicas > 1000 {
		return fail("spec.replicas", fmt.Sprintf("Invalid value: %d: want 0-1000", replicas))
	}
	if spec.Selector == nil {
		return fail("spec.selector", "Required value")
	}
	sel, err := metav1.LabelSelectorAsSelector(spec.Selector)
	if err != nil {
		return fail("spec.selector", "Invalid value: "+err.Error())
	}
	if sel.Empty() {
		return fail("spec.selector", "Invalid value: empty selector is invalid for a "+kind)
	}
	if !sel.Matches(labels.Set(spec.Template.Labels)) {
		return fail("spec.template.metadata.labels", "Invalid value: `selector` does not match template `labels`")
	}
	w := &workload{kind: kind, namespace: ns, name: meta.Name, rsName: meta.Name, template: spec.Template, replicas: replicas, used: map[string]bool{}}
	if kind == "Deployment" {
		hash := podTemplateHash(&spec.Template)
		w.rsName = meta.Name + "-" + hash
		if w.template.Labels == nil {
			w.template.Labels = map[string]string{}
		}
		w.template.Labels["pod-template-hash"] = hash
	}
	h := fnv.New64a()
	h.Write([]byte(kind + " " + w.key()))
	w.rng = rand.New(rand.NewPCG(seed, h.Sum64()))
	for _, prev := range into.workloads {
		if prev.kind == kind && prev.key() == w.key() {
			return fail("metadata.name", "defined twice")
		}
	}
	// Validate the template as a pod, reporting template fields.
	probe := w.newPod()
	w.pods, w.used = nil, map[string]bool{}
	w.rng = rand.New(rand.NewPCG(seed, h.Sum64()))
	if el := validateObject(probe); len(el) > 0 {
		for _, fe := range el {
			p := fe.Field
			switch {
			case strings.HasPrefix(p, "spec."):
				p = "spec.template." + p
			case strings.HasPrefix(p, "metadata.labels"), strings.HasPrefix(p, "metadata.annotations"):
				p = "spec.template." + p
			}
			errs = append(errs, s.manifestErr(src, nodeLine(doc, p), p, what+": pod template: "+strings.Replace(fe.Error(), fe.Field, p, 1)))
		}
		return errors.Join(errs...)
	}
	for i := 0; i < replicas; i++ {
		pod := w.newPod()
		if err := into.claim(pod, fmt.Sprintf("%s:%d (%s)", src.file, doc.Line, what)); err != nil {
			return fail("metadata.name", err.Error())
		}
		w.initial = append(w.initial, pod)
	}
	into.workloads = append(into.workloads, w)
	return nil
}

func scalarChild(n *yaml.Node, key string) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key && n.Content[i+1].Kind == yaml.ScalarNode {
			return n.Content[i+1].Value
		}
	}
	return ""
}

func shift(n *yaml.Node, by int) {
	if n == nil {
		return
	}
	n.Line += by
	for _, c := range n.Content {
		shift(c, by)
	}
}

// nodeLine returns the line of a field path ("spec.template.spec.containers[0].image")
// in a YAML mapping, or of its deepest ancestor present.
func nodeLine(root *yaml.Node, path string) int {
	n := root
	line := n.Line
	for _, seg := range splitPath(path) {
		n = resolve(n)
		if n == nil {
			break
		}
		if i, err := strconv.Atoi(seg); err == nil && n.Kind == yaml.SequenceNode {
			if i < 0 || i >= len(n.Content) {
				return line
			}
			n = n.Content[i]
			line = n.Line
			continue
		}
		if n.Kind != yaml.MappingNode {
			return line
		}
		found := false
		for k := 0; k+1 < len(n.Content); k += 2 {
			if n.Content[k].Value == seg {
				line, n, found = n.Content[k].Line, n.Content[k+1], true
				break
			}
		}
		if !found {
			return line
		}
	}
	return line
}

func splitPath(p string) []string {
	var out []string
	for _, part := range strings.Split(p, ".") {
		for part != "" {
			i := strings.IndexByte(part, '[')
			if i < 0 {
				out = append(out, part)
				break
			}
			if i > 0 {
				out = append(out, part[:i])
			}
			j := strings.IndexByte(part[i:], ']')
			if j < 0 {
				out = append(out, part[i+1:])
				break
			}
			out = append(out, part[i+1:i+j])
			part = part[i+j+1:]
		}
	}
	return out
}
