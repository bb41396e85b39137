package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Manifest is one object read from a manifest file, with where it came from.
type Manifest struct {
	// Object is a *corev1.Service, *corev1.Pod, *corev1.Node,
	// *corev1.Namespace, *corev1.Endpoints, *discoveryv1.EndpointSlice or
	// *networkingv1.NetworkPolicy, with apiVersion and kind set. It is decoded only: not defaulted, not
	// validated.
	Object runtime.Object
	// File is the file name as given to Load (or the path for LoadPaths).
	File string
	// Doc is the 0-based index of the YAML document (or JSON value) in the
	// file; messages print it 1-based ("document 2").
	Doc int
	// Line is the 1-based line where the object starts: the document's first
	// content line, or the item's line for an object inside a List.
	Line int
	// Item is the 1-based position of the object among the items of a
	// `kind: List` (or ServiceList, ...) document; 0 when the document is the
	// object itself.
	Item int

	node *yamlv3.Node // the object's YAML node (absolute lines), nil if unknown
}

// ManifestError is a problem with one document or object of a manifest file.
// Its text names the file and line, the document, the object and the field:
//
//	svc.yaml:14 (document 2 from line 12, Service "default/web"): spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive
type ManifestError struct {
	File    string
	Line    int    // line of the offending field when known, else of the object or document
	Doc     int    // 0-based document index
	DocLine int    // line where the document (or List item) starts
	Item    int    // 1-based List item, 0 if none
	Object  string // `Service "default/web"`, or "" when not known yet
	Field   string // field path ("spec.ports[0].port"), "" when the problem is not one field
	Msg     string // the message; for field problems it starts with the field path
	Err     error  // the underlying error, if any
}

func (e *ManifestError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d (document %d", e.File, e.Line, e.Doc+1)
	if e.Item > 0 {
		fmt.Fprintf(&b, ", item %d", e.Item)
	}
	if e.DocLine > 0 && e.DocLine != e.Line {
		fmt.Fprintf(&b, " from line %d", e.DocLine)
	}
	if e.Object != "" {
		b.WriteString(", ")
		b.WriteString(e.Object)
	}
	b.WriteString("): ")
	b.WriteString(e.Msg)
	return b.String()
}

func (e *ManifestError) Unwrap() error { return e.Err }

// String describes where the manifest came from: `svc.yaml:12 (document 2, Service "default/web")`.
func (m Manifest) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d (document %d", m.File, m.Line, m.Doc+1)
	if m.Item > 0 {
		fmt.Fprintf(&b, ", item %d", m.Item)
	}
	if m.Object != nil {
		b.WriteString(", ")
		b.WriteString(describe(m.Object))
	}
	b.WriteString(")")
	return b.String()
}

// FieldLine returns the line of a field path such as "spec.ports[0].port"
// inside the object, or of its deepest ancestor present in the file (a
// missing field reports the line of its parent), or m.Line.
func (m Manifest) FieldLine(path string) int {
	if m.node == nil || path == "" {
		return m.Line
	}
	if line := lookupLine(m.node, path); line > 0 {
		return line
	}
	return m.Line
}

// Errorf returns a ManifestError at the field path (may be "").
func (m Manifest) Errorf(path, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	return m.newError(path, msg, nil)
}

func (m Manifest) newError(path, msg string, err error) *ManifestError {
	obj := ""
	if m.Object != nil {
		obj = describe(m.Object)
	}
	return &ManifestError{
		File: m.File, Line: m.FieldLine(path), Doc: m.Doc, DocLine: m.Line, Item: m.Item,
		Object: obj, Field: path, Msg: msg, Err: err,
	}
}

// Annotate turns an error about the manifest's object (a 422 Invalid status
// error from the Store, a *field.Error, an aggregate such as
// Validate(obj).ToAggregate(), or anything else) into ManifestErrors carrying
// the file, the line of each offending field and the document. Several field
// errors become several ManifestErrors joined with errors.Join. A nil error
// stays nil.
func (m Manifest) Annotate(err error) error {
	if err == nil {
		return nil
	}
	var status apierrors.APIStatus
	var agg utilerrors.Aggregate
	var fe *field.Error
	switch {
	case errors.As(err, &status) && status.Status().Details != nil && len(status.Status().Details.Causes) > 0:
		var out []error
		for _, c := range status.Status().Details.Causes {
			msg := c.Message
			if c.Field != "" {
				msg = c.Field + ": " + c.Message
			}
			out = append(out, m.newError(c.Field, msg, err))
		}
		return errors.Join(out...)
	case errors.As(err, &agg):
		var out []error
		for _, e := range agg.Errors() {
			out = append(out, m.Annotate(e))
		}
		return errors.Join(out...)
	case errors.As(err, &fe):
		return m.newError(fe.Field, fe.Error(), err)
	}
	return m.newError("", err.Error(), err)
}

// AnnotateFields is Annotate for a field.ErrorList (as Validate returns).
func (m Manifest) AnnotateFields(el field.ErrorList) error {
	var out []error
	for _, e := range el {
		out = append(out, m.newError(e.Field, e.Error(), e))
	}
	return errors.Join(out...)
}

// Objects returns the objects of the manifests, in order.
func Objects(ms []Manifest) []runtime.Object {
	out := make([]runtime.Object, len(ms))
	for i := range ms {
		out[i] = ms[i].Object
	}
	return out
}

// LoadPaths loads files and directories. A directory contributes its *.yaml,
// *.yml and *.json files (not its subdirectories), sorted by name; a file
// named explicitly is loaded whatever its extension. Errors from all files
// are reported together, and if there is any error no objects are returned.
func LoadPaths(paths ...string) ([]Manifest, error) {
	var files []string
	var errs []error
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var names []string
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			files = append(files, filepath.Join(p, n))
		}
	}
	var out []Manifest
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ms, err := Load(f, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, ms...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Load decodes the objects in one file: YAML (one or more documents
// separated by `---` lines) or JSON (one or more concatenated values). A
// document may be a single object or a `kind: List` (as printed by
// `kubectl get -A -o yaml`) or a typed list (ServiceList, ...), whose items
// are expanded, each keeping its own position. Decoding is strict: unknown
// fields, duplicate fields, unknown kinds and wrong value types are errors.
// Errors name the file, line, document, object and field; all of them are
// reported (joined), and if there is any error no objects are returned.
func Load(name string, data []byte) ([]Manifest, error) {
	var docs []rawDoc
	var errs []error
	if isJSON(data) {
		docs, errs = splitJSON(name, data)
	} else {
		docs = splitYAML(data)
	}
	var out []Manifest
	for _, d := range docs {
		ms, derrs := decodeDoc(name, d)
		out = append(out, ms...)
		errs = append(errs, derrs...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// rawDoc is one document of a file before decoding.
type rawDoc struct {
	index     int    // 0-based document index
	firstLine int    // line number of data's first line
	data      []byte // the document text (YAML), or a JSON value
	json      bool
}

func isJSON(data []byte) bool { return IsJSON(data) }

// IsJSON reports whether a manifest file's text is JSON (one or more concatenated
// values) rather than YAML. Both may start with '{': a YAML flow mapping
// (`{apiVersion: v1, kind: Service, ...}`) is YAML, so that its lines and fields are
// found. Text starting with '{' is JSON when its first value is valid JSON, when its
// first key is quoted (JSON with a mistake, whose JSON error is reported), or when it
// is not YAML either. (kubectl's decoder also falls back to YAML when the first
// value is not JSON.)
func IsJSON(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(t) == 0 || t[0] != '{' {
		return false
	}
	var raw json.RawMessage
	if json.NewDecoder(bytes.NewReader(t)).Decode(&raw) == nil {
		return true
	}
	if k := bytes.TrimLeft(t[1:], " \t\r\n"); len(k) == 0 || k[0] == '"' || k[0] == '}' {
		return true // a quoted first key: JSON with a mistake, reported as JSON
	}
	var n yamlv3.Node
	return yamlv3.Unmarshal(t, &n) != nil
}

// splitJSON cuts a stream of concatenated JSON values.
func splitJSON(name string, data []byte) ([]rawDoc, []error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var docs []rawDoc
	// Lines are counted on from the previous value, not from the start of
	// the file each time: a stream of many small values stays linear.
	lineOff, line := 0, 1
	for i := 0; ; i++ {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			break
		}
		if err != nil {
			off := dec.InputOffset()
			var se *json.SyntaxError
			if errors.As(err, &se) {
				off = se.Offset
			}
			return nil, []error{&ManifestError{File: name, Line: lineAt(data, int(off)), Doc: i, Msg: "invalid JSON: " + err.Error(), Err: err}}
		}
		start := int(dec.InputOffset()) - len(raw)
		line += bytes.Count(data[lineOff:start], []byte("\n"))
		lineOff = start
		docs = append(docs, rawDoc{index: i, firstLine: line, data: raw, json: true})
	}
	return docs, nil
}

// lineAt returns the 1-based line of a byte offset.
func lineAt(data []byte, off int) int {
	if off > len(data) {
		off = len(data)
	}
	if off < 0 {
		off = 0
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// splitYAML cuts a YAML stream at `---` (and `...`) marker lines. A chunk
// counts as a document if it has content or follows a `---` marker.
func splitYAML(data []byte) []rawDoc {
	lines := bytes.SplitAfter(data, []byte("\n"))
	var docs []rawDoc
	var cur bytes.Buffer
	curFirst := 1
	afterMarker := false
	index := 0
	flush := func() {
		text := append([]byte(nil), cur.Bytes()...)
		if afterMarker || hasContent(text) {
			docs = append(docs, rawDoc{index: index, firstLine: curFirst, data: text})
			index++
		}
		cur.Reset()
	}
	for i, ln := range lines {
		if len(ln) == 0 {
			continue
		}
		body := bytes.TrimRight(ln, "\r\n")
		if i == 0 {
			body = bytes.TrimPrefix(body, []byte("\ufeff"))
		}
		marker := ""
		if isMarker(body, "---") {
			marker = "---"
		} else if isMarker(body, "...") {
			marker = "..."
		}
		if marker == "" {
			cur.Write(ln)
			continue
		}
		flush()
		afterMarker = marker == "---"
		curFirst = i + 1
		if marker == "---" {
			// Keep what follows the marker on its line ("--- {a: 1}"),
			// padded so that columns stay where they were.
			cur.WriteString("   ")
			cur.Write(ln[3:])
		} else {
			curFirst = i + 2
		}
	}
	flush()
	return docs
}

func isMarker(line []byte, m string) bool {
	if !bytes.HasPrefix(line, []byte(m)) {
		return false
	}
	rest := line[len(m):]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t'
}

// hasContent reports whether YAML text has anything but blank lines and comments.
func hasContent(text []byte) bool {
	return firstContentLine(text) > 0
}

// firstContentLine returns the 1-based line of the first line that is not
// blank or a comment, or 0.
func firstContentLine(text []byte) int {
	for i, ln := range bytes.Split(text, []byte("\n")) {
		t := bytes.TrimSpace(ln)
		if len(t) > 0 && t[0] != '#' {
			return i + 1
		}
	}
	return 0
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// decodeDoc decodes one document into zero or more manifests.
func decodeDoc(file string, d rawDoc) ([]Manifest, []error) {
	docLine := d.firstLine
	if !d.json {
		if l := firstContentLine(d.data); l > 0 {
			docLine = d.firstLine + l - 1
		}
	}
	base := Manifest{File: file, Doc: d.index, Line: docLine}
	fail := func(line int, msg string, err error) []error {
		return []error{&ManifestError{File: file, Line: line, Doc: d.index, DocLine: docLine, Msg: msg, Err: err}}
	}

	// Positions: parse the text (YAML, or JSON, which is YAML) into a YAML
	// node tree. This is best effort (YAML 1.1 vs 1.2 quirks); without it
	// errors point at the document. The tree keeps aliases as references,
	// so it is as big as the text; the conversion to JSON below expands
	// every alias into a copy.
	var root yamlv3.Node
	var tree *yamlv3.Node
	if err := yamlv3.Unmarshal(d.data, &root); err == nil && root.Kind == yamlv3.DocumentNode && len(root.Content) == 1 {
		tree = root.Content[0]
		shiftLines(tree, d.firstLine-1)
	}

	var j []byte
	if d.json {
		j = d.data
	} else {
		if tree != nil {
			if ae := CheckAliasExpansion(tree); ae != nil {
				return nil, fail(ae.Line, "invalid YAML: "+ae.Error(), nil)
			}
		}
		var err error
		j, err = yaml.YAMLToJSONStrict(d.data)
		if err != nil {
			line := docLine
			msg := err.Error()
			msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
			if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
				if n, convErr := strconv.Atoi(m[1]); convErr == nil {
					line = d.firstLine + n - 1
					msg = strings.Replace(msg, m[0], "line "+strconv.Itoa(line), 1)
				}
			}
			return nil, fail(line, "invalid YAML: "+strings.TrimSpace(msg), err)
		}
	}
	j = bytes.TrimSpace(j)
	if len(j) == 0 || string(j) == "null" {
		return nil, nil // an empty document
	}
	if j[0] != '{' {
		return nil, fail(docLine, "expected an object with apiVersion and kind, found "+jsonKindOf(j), nil)
	}

	if tree != nil {
		base.node = tree
		if base.node.Line > 0 {
			base.Line = base.node.Line
		}
	}

	var tm metav1.TypeMeta
	_ = json.Unmarshal(j, &tm)
	if listKind, itemKind, ok := isListKind(tm); ok {
		return decodeList(base, j, listKind, itemKind)
	}
	obj, errs := decodeObject(base, j, "")
	if len(errs) > 0 {
		return nil, errs
	}
	base.Object = obj
	return []Manifest{base}, nil
}

func jsonKindOf(j []byte) string {
	if len(j) == 0 {
		return "nothing"
	}
	switch j[0] {
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// isListKind recognises `kind: List` and typed lists such as ServiceList.
func isListKind(tm metav1.TypeMeta) (listKind, itemKind string, ok bool) {
	if tm.Kind == "List" {
		return "List", "", true
	}
	if k, found := strings.CutSuffix(tm.Kind, "List"); found {
		if ki, known := kinds[k]; known && (tm.APIVersion == "" || tm.APIVersion == ki.gvk.GroupVersion().String()) {
			return tm.Kind, k, true
		}
	}
	return "", "", false
}

type listDoc struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ListMeta   `json:"metadata"`
	Items      []json.RawMessage `json:"items"`
}

func decodeList(base Manifest, j []byte, listKind, itemKind string) ([]Manifest, []error) {
	var l listDoc
	strictErrs, err := sjson.UnmarshalStrict(j, &l)
	if err != nil {
		return nil, []error{base.newError("", fmt.Sprintf("decoding %s: %v", listKind, cleanJSONError(err)), err)}
	}
	var errs []error
	for _, se := range strictErrs {
		errs = append(errs, strictError(base, se))
	}
	var itemsNode *yamlv3.Node
	if base.node != nil {
		itemsNode = childNode(base.node, "items")
	}
	var out []Manifest
	for i, raw := range l.Items {
		m := base
		m.Item = i + 1
		m.node = nil
		if itemsNode != nil && itemsNode.Kind == yamlv3.SequenceNode && i < len(itemsNode.Content) {
			m.node = deref(itemsNode.Content[i])
			m.Line = m.node.Line
		}
		obj, oerrs := decodeObject(m, raw, itemKind)
		if len(oerrs) > 0 {
			errs = append(errs, oerrs...)
			continue
		}
		m.Object = obj
		out = append(out, m)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// decodeObject strictly decodes one object; defaultKind is used for items
// of typed lists, which may omit apiVersion and kind.
func decodeObject(m Manifest, j []byte, defaultKind string) (runtime.Object, []error) {
	if len(bytes.TrimSpace(j)) == 0 || j[0] != '{' {
		return nil, []error{m.newError("", "expected an object with apiVersion and kind, found "+jsonKindOf(bytes.TrimSpace(j)), nil)}
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(j, &tm); err != nil {
		return nil, []error{m.newError("", "reading apiVersion and kind: "+cleanJSONError(err), err)}
	}
	if tm.Kind == "" && defaultKind != "" {
		tm.Kind = defaultKind
		if tm.APIVersion == "" {
			tm.APIVersion = kinds[defaultKind].gvk.GroupVersion().String()
		}
	}
	if tm.Kind == "" {
		return nil, []error{m.newError("kind", "kind: Required value: every object needs apiVersion and kind", nil)}
	}
	if tm.APIVersion == "" {
		return nil, []error{m.newError("apiVersion", "apiVersion: Required value: every object needs apiVersion and kind", nil)}
	}
	ki, ok := kinds[tm.Kind]
	if !ok || ki.gvk.GroupVersion().String() != tm.APIVersion {
		return nil, []error{m.newError("kind", fmt.Sprintf("unknown kind %q (apiVersion %q); clusterlab reads %s", tm.Kind, tm.APIVersion, supportedKinds()), nil)}
	}
	obj := ki.newObj()
	strictErrs, err := sjson.UnmarshalStrict(j, obj)
	if err != nil {
		m.Object = obj // for the name in the message, when it was decoded
		if objectMeta(obj).Name == "" {
			m.Object = nil
		}
		return nil, []error{typeError(m, err)}
	}
	m.Object = obj
	if len(strictErrs) > 0 {
		errs := make([]error, 0, len(strictErrs))
		for _, se := range strictErrs {
			errs = append(errs, strictError(m, se))
		}
		return nil, errs
	}
	obj.GetObjectKind().SetGroupVersionKind(ki.gvk)
	return obj, nil
}

// strictError positions an unknown/duplicate field error from sigs.k8s.io/json.
func strictError(m Manifest, se error) error {
	path := ""
	if fe, ok := se.(interface{ FieldPath() string }); ok {
		path = fe.FieldPath()
	}
	return m.newError(path, se.Error(), se)
}

// typeError positions a "cannot unmarshal X into Y" error. encoding/json
// reports the field path without list indexes ("spec.ports.port"); the YAML
// tree tells which element it was.
func typeError(m Manifest, err error) error {
	value, fieldPath, typ, ok := unmarshalTypeError(err)
	if !ok || fieldPath == "" {
		return m.newError("", "decoding: "+cleanJSONError(err), err)
	}
	path := fieldPath
	var shown string
	if m.node != nil {
		if c, found := findTypedCandidate(m.node, fieldPath, value); found {
			path = c.path
			if c.node.Kind == yamlv3.ScalarNode {
				shown = " " + strconv.Quote(c.node.Value)
			}
		}
	}
	msg := fmt.Sprintf("%s: got %s, expected %s", path, value, typ)
	if shown != "" {
		msg = fmt.Sprintf("%s: Invalid value:%s: got %s, expected %s", path, shown, value, typ)
	}
	return m.newError(path, msg, err)
}

// unmarshalTypeError reads the fields of an *UnmarshalTypeError from
// encoding/json or from sigs.k8s.io/json's internal copy of it.
func unmarshalTypeError(err error) (value, fieldPath, typ string, ok bool) {
	for e := err; e != nil; e = errors.Unwrap(e) {
		v := reflect.ValueOf(e)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct || v.Elem().Type().Name() != "UnmarshalTypeError" {
			continue
		}
		s := v.Elem()
		get := func(n string) string {
			f := s.FieldByName(n)
			if f.IsValid() && f.Kind() == reflect.String {
				return f.String()
			}
			return ""
		}
		if t := s.FieldByName("Type"); t.IsValid() && !t.IsNil() {
			if rt, isType := t.Interface().(reflect.Type); isType {
				typ = rt.String()
			}
		}
		return get("Value"), get("Field"), typ, true
	}
	return "", "", "", false
}

func cleanJSONError(err error) string {
	return strings.TrimPrefix(err.Error(), "json: ")
}

// --- YAML node helpers -------------------------------------------------

// minAliasAllowance is how much alias expansion any document may add to its
// own size (see aliasExpansionTooBig): 1 Mi nodes and characters, a few MB
// of JSON.
const minAliasAllowance = 1 << 20

// expansionWeight is the size of a YAML tree in nodes plus scalar
// characters, the measure of the JSON the tree turns into. With expand,
// every alias counts as a copy of its anchor's value (as the conversion to
// JSON copies it); without, as one node. An alias to a node that contains
// it (a cycle, which the YAML decoder rejects) counts as one node. The
// count stops growing past stop (when stop > 0), and saturates at
// math.MaxInt/2 when it does not. Work is linear in the
// number of nodes of the tree: expanded weights are memoized per node.
func expansionWeight(n *yamlv3.Node, expand bool) int {
	w, _ := weigh(n, expand, 0)
	return w
}

func weigh(root *yamlv3.Node, expand bool, stop int) (int, *yamlv3.Node) {
	const inProgress = -1
	memo := map[*yamlv3.Node]int{}
	add := func(a, b int) int {
		if stop > 0 && a+b > stop {
			return stop + 1
		}
		if a > math.MaxInt/2 || b > math.MaxInt/2 {
			return math.MaxInt / 2 // saturate rather than overflow
		}
		return a + b
	}
	var over *yamlv3.Node // the alias at which the total went past stop
	var walk func(n *yamlv3.Node) int
	walk = func(n *yamlv3.Node) int {
		if n == nil {
			return 0
		}
		if w, ok := memo[n]; ok {
			if w == inProgress {
				return 1
			}
			return w
		}
		memo[n] = inProgress
		w := 1 + len(n.Value)
		if n.Kind == yamlv3.AliasNode {
			w = 1
			if expand {
				w = walk(n.Alias)
			}
		}
		for _, c := range n.Content {
			w = add(w, walk(c))
			if over == nil && stop > 0 && w > stop {
				over = firstAlias(c)
			}
		}
		memo[n] = w
		return w
	}
	w := walk(root)
	if over == nil && stop > 0 && w > stop {
		over = firstAlias(root)
	}
	return w, over
}

// firstAlias returns the first alias node of a tree in document order,
// without following aliases, or nil.
func firstAlias(n *yamlv3.Node) *yamlv3.Node {
	if n == nil || n.Kind == yamlv3.AliasNode {
		return n
	}
	for _, c := range n.Content {
		if a := firstAlias(c); a != nil {
			return a
		}
	}
	return nil
}

// aliasExpansionTooBig reports the alias at which expanding the aliases of
// a document tree makes it bigger than its own size plus
// max(minAliasAllowance, its own size), and that limit. A few short
// aliases nested in one another ("billion laughs"), or many aliases of one
// long string, would otherwise turn a small file into gigabytes of JSON.
func aliasExpansionTooBig(tree *yamlv3.Node) (*yamlv3.Node, int) {
	plain := expansionWeight(tree, false)
	limit := plain + max(minAliasAllowance, plain)
	w, over := weigh(tree, true, limit)
	if w <= limit {
		return nil, limit
	}
	if over == nil {
		over = tree // not reached: only an alias adds weight beyond plain
	}
	return over, limit
}

// CheckAliasExpansion applies Load's limit on alias expansion to a YAML node tree (a
// document, or its content) that another loader is about to turn into JSON: it returns an
// error naming the alias (its Line is the alias node's line, relative to whatever the
// tree's lines are relative to) when expanding the tree's aliases would make it bigger
// than its own size plus max(1 Mi, its size) nodes and characters, and nil otherwise.
// The work is linear in the size of the tree.
func CheckAliasExpansion(tree *yamlv3.Node) *AliasExpansionError {
	if tree != nil && tree.Kind == yamlv3.DocumentNode && len(tree.Content) == 1 {
		tree = tree.Content[0]
	}
	if tree == nil {
		return nil
	}
	alias, limit := aliasExpansionTooBig(tree)
	if alias == nil {
		return nil
	}
	return &AliasExpansionError{Line: alias.Line, Alias: alias.Value, Limit: limit, Plain: expansionWeight(tree, false)}
}

// AliasExpansionError is CheckAliasExpansion's error.
type AliasExpansionError struct {
	Line  int    // the alias's line
	Alias string // the alias's name (without the *)
	Limit int    // nodes and characters allowed
	Plain int    // nodes and characters in the text, aliases counted once
}

func (e *AliasExpansionError) Error() string {
	return fmt.Sprintf("alias *%s makes the document expand to more than %d nodes and characters (%d in the text, with aliases counted once); refusing to expand it", e.Alias, e.Limit, e.Plain)
}

func shiftLines(n *yamlv3.Node, by int) {
	if n == nil || by == 0 {
		return
	}
	seen := map[*yamlv3.Node]bool{}
	var walk func(*yamlv3.Node)
	walk = func(n *yamlv3.Node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		n.Line += by
		for _, c := range n.Content {
			walk(c)
		}
		walk(n.Alias)
	}
	walk(n)
}

func deref(n *yamlv3.Node) *yamlv3.Node {
	for i := 0; n != nil && n.Kind == yamlv3.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

// childNode returns the value node of key in a mapping.
func childNode(n *yamlv3.Node, key string) *yamlv3.Node {
	_, v := mappingEntry(n, key)
	return v
}

// mappingEntry returns the key and value nodes of key in a mapping.
func mappingEntry(n *yamlv3.Node, key string) (*yamlv3.Node, *yamlv3.Node) {
	n = deref(n)
	if n == nil || n.Kind != yamlv3.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], deref(n.Content[i+1])
		}
	}
	return nil, nil
}

type pathSeg struct {
	name    string
	bracket bool // [0] or [key]
}

// parsePath splits "spec.ports[0].port" or "metadata.labels[app.kubernetes.io/name]".
func parsePath(p string) []pathSeg {
	var segs []pathSeg
	var cur strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '.':
			if cur.Len() > 0 {
				segs = append(segs, pathSeg{name: cur.String()})
				cur.Reset()
			}
		case '[':
			if cur.Len() > 0 {
				segs = append(segs, pathSeg{name: cur.String()})
				cur.Reset()
			}
			end := strings.IndexByte(p[i+1:], ']')
			if end < 0 {
				segs = append(segs, pathSeg{name: p[i+1:], bracket: true})
				return segs
			}
			segs = append(segs, pathSeg{name: p[i+1 : i+1+end], bracket: true})
			i += end + 1
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 {
		segs = append(segs, pathSeg{name: cur.String()})
	}
	return segs
}

// lookupLine returns the line of the deepest node along the path.
func lookupLine(root *yamlv3.Node, path string) int {
	n := deref(root)
	line := n.Line
	for _, s := range parsePath(path) {
		if n == nil {
			break
		}
		switch {
		case n.Kind == yamlv3.SequenceNode && s.bracket:
			i, err := strconv.Atoi(s.name)
			if err != nil || i < 0 || i >= len(n.Content) {
				return line
			}
			n = deref(n.Content[i])
			line = n.Line
		case n.Kind == yamlv3.MappingNode:
			k, v := mappingEntry(n, s.name)
			if k == nil {
				return line
			}
			n, line = v, k.Line
		default:
			return line
		}
	}
	return line
}

type candidate struct {
	node *yamlv3.Node
	path string
}

// findTypedCandidate finds, for an index-free path from a JSON type error
// ("spec.ports.port"), the first node whose YAML type matches the JSON kind
// the decoder complained about ("string", "number", "bool", "object", "array").
func findTypedCandidate(root *yamlv3.Node, dotted, value string) (candidate, bool) {
	cands := []candidate{{deref(root), ""}}
	expandSeq := func(in []candidate) []candidate {
		var out []candidate
		for _, c := range in {
			if c.node.Kind == yamlv3.SequenceNode {
				for i, item := range c.node.Content {
					out = append(out, candidate{deref(item), fmt.Sprintf("%s[%d]", c.path, i)})
				}
				continue
			}
			out = append(out, c)
		}
		return out
	}
	for _, seg := range strings.Split(dotted, ".") {
		var next []candidate
		for _, c := range expandSeq(cands) {
			if _, v := mappingEntry(c.node, seg); v != nil {
				p := seg
				if c.path != "" {
					p = c.path + "." + seg
				}
				next = append(next, candidate{v, p})
			}
		}
		cands = next
	}
	want := strings.Fields(value)
	if len(want) == 0 {
		return candidate{}, false
	}
	// The value complained about may be an element of the field (a map value
	// or a list item) rather than the field itself.
	var all []candidate
	for _, c := range cands {
		all = append(all, c)
		switch {
		case c.node.Kind == yamlv3.MappingNode && want[0] != "object":
			for i := 0; i+1 < len(c.node.Content); i += 2 {
				all = append(all, candidate{deref(c.node.Content[i+1]), fmt.Sprintf("%s[%s]", c.path, c.node.Content[i].Value)})
			}
		case c.node.Kind == yamlv3.SequenceNode && want[0] != "array":
			for i, item := range c.node.Content {
				all = append(all, candidate{deref(item), fmt.Sprintf("%s[%d]", c.path, i)})
			}
		}
	}
	for _, c := range all {
		if jsonKindOfNode(c.node) == want[0] {
			return c, true
		}
	}
	if len(cands) > 0 {
		return cands[0], true
	}
	return candidate{}, false
}

var yaml11Bools = map[string]bool{"y": true, "yes": true, "n": true, "no": true, "on": true, "off": true, "true": true, "false": true}

// jsonKindOfNode says what JSON type sigs.k8s.io/yaml turns a node into.
func jsonKindOfNode(n *yamlv3.Node) string {
	switch n.Kind {
	case yamlv3.MappingNode:
		return "object"
	case yamlv3.SequenceNode:
		return "array"
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		return "number"
	case "!!bool":
		return "bool"
	case "!!null":
		return "null"
	}
	if n.Style == 0 && yaml11Bools[strings.ToLower(n.Value)] {
		return "bool" // YAML 1.1, as sigs.k8s.io/yaml reads it
	}
	return "string"
}
