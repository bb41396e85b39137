package scenario

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// Error is a problem with a scenario: the file, the line and the field it is about.
//
//	demo.yaml:14: steps[2].connect.count: want a whole number, got "ten"
type Error struct {
	File  string // "" for a scenario built in Go
	Line  int    // 0 when not known
	Field string // the field path, e.g. "steps[2].connect.to"; "" for the whole file
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// IsInputError reports whether err is (or wraps) a problem with the scenario's input:
// the file, its manifests, or a field. Such errors exit the CLI with code 2.
func IsInputError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

var durationType = reflect.TypeOf(Duration(0))
var manifestType = reflect.TypeOf(Manifest{})

// decoder decodes a YAML node tree into the scenario types strictly: unknown fields,
// duplicate keys and wrong types are errors naming the line and the field path. It
// records the line of every field it sees, so that later checks can name lines too.
type decoder struct {
	file  string
	lines map[string]int
	errs  []error
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Field: path, Msg: fmt.Sprintf(format, args...)})
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && (n.Kind == yaml.AliasNode || n.Kind == yaml.DocumentNode) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else if len(n.Content) > 0 {
			n = n.Content[0]
		} else {
			return nil
		}
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "something else"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// decode fills v from n. path names v in messages ("" for the top).
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n = resolve(n)
	if n == nil {
		return
	}
	t := v.Type()
	switch {
	case t == manifestType:
		d.decodeManifest(n, v.Addr().Interface().(*Manifest), path)
		return
	case t == durationType:
		if isNull(n) {
			return
		}
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "want a duration such as 30s or 1m30s, got %s", describeNode(n))
			return
		}
		dur, err := parseDuration(n.Value)
		if err != nil {
			d.fail(n, path, "%v", err)
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		if isNull(n) {
			v.SetZero()
			return
		}
		p := reflect.New(t.Elem())
		d.decode(n, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if isNull(n) {
			v.SetZero()
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(n, path, "want a list, got %s", describeNode(n))
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = c.Line
			d.decode(c, s.Index(i), p)
		}
		v.Set(s)
	case reflect.Map:
		if isNull(n) {
			v.SetZero()
			return
		}
		if n.Kind != yaml.MappingNode {
			d.fail(n, path, "want a mapping, got %s", describeNode(n))
			return
		}
		m := reflect.MakeMap(t)
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := resolve(n.Content[i]), n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				d.fail(k, path, "keys must be plain strings")
				continue
			}
			p := path + "." + k.Value
			if seen[k.Value] {
				d.fail(k, p, "appears twice")
				continue
			}
			seen[k.Value] = true
			d.lines[p] = k.Line
			ev := reflect.New(t.Elem()).Elem()
			d.decode(val, ev, p)
			m.SetMapIndex(reflect.ValueOf(k.Value), ev)
		}
		v.Set(m)
	case reflect.String:
		if isNull(n) {
			return
		}
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "want a string, got %s", describeNode(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || isNull(n) {
			d.fail(n, path, "want true or false, got %s", describeNode(n))
			return
		}
		switch n.Value {
		case "true", "True", "TRUE":
			v.SetBool(true)
		case "false", "False", "FALSE":
			v.SetBool(false)
		default:
			d.fail(n, path, "want true or false, got %q", n.Value)
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		if n.Kind != yaml.ScalarNode || isNull(n) {
			d.fail(n, path, "want a whole number, got %s", describeNode(n))
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil || v.OverflowInt(i) {
			d.fail(n, path, "want a whole number, got %q", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		if n.Kind != yaml.ScalarNode || isNull(n) {
			d.fail(n, path, "want a whole number of zero or more, got %s", describeNode(n))
			return
		}
		u, err := strconv.ParseUint(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil || v.OverflowUint(u) {
			d.fail(n, path, "want a whole number of zero or more, got %q", n.Value)
			return
		}
		v.SetUint(u)
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode || isNull(n) {
			d.fail(n, path, "want a number, got %s", describeNode(n))
			return
		}
		s := n.Value
		pct := strings.HasSuffix(s, "%")
		f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(n, path, "want a number, got %q", n.Value)
			return
		}
		if pct {
			f /= 100
		}
		v.SetFloat(f)
	default:
		panic(fmt.Sprintf("scenario: decoder does not handle %s", t))
	}
}

// field is one YAML key of a struct (inline embedded structs contribute theirs).
type yfield struct {
	name  string
	index []int
}

func structFields(t reflect.Type) []yfield {
	var out []yfield
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(opts, "inline") {
			for _, sub := range structFields(f.Type) {
				out = append(out, yfield{sub.name, append([]int{i}, sub.index...)})
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, yfield{name, []int{i}})
	}
	return out
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		what := "a mapping of fields"
		if path == "" {
			what = "a mapping (name, cluster, manifests, steps)"
		}
		d.fail(n, path, "want %s, got %s", what, describeNode(n))
		return
	}
	fields := structFields(v.Type())
	byName := map[string]yfield{}
	var names []string
	for _, f := range fields {
		byName[f.name] = f
		names = append(names, f.name)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "keys must be plain strings")
			continue
		}
		if k.Value == "<<" {
			d.fail(k, path, "merge keys (<<) are not supported")
			continue
		}
		p := join(path, k.Value)
		f, ok := byName[k.Value]
		if !ok {
			msg := "unknown field"
			if s := suggest(k.Value, names); s != "" {
				msg += " (did you mean " + s + "?)"
			} else {
				sort.Strings(names)
				msg += " (want one of " + strings.Join(names, ", ") + ")"
			}
			d.fail(k, p, "%s", msg)
			continue
		}
		if seen[k.Value] {
			d.fail(k, p, "appears twice")
			continue
		}
		seen[k.Value] = true
		d.lines[p] = k.Line
		d.decode(val, v.FieldByIndex(f.index), p)
	}
}

func (d *decoder) decodeManifest(n *yaml.Node, m *Manifest, path string) {
	m.line = n.Line
	if n.Kind == yaml.MappingNode {
		keys := map[string]*yaml.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			keys[n.Content[i].Value] = resolve(n.Content[i+1])
		}
		if p, ok := keys["path"]; ok && len(keys) == 1 {
			if p.Kind != yaml.ScalarNode || p.Value == "" || isNull(p) {
				d.fail(p, path+".path", "want a file or directory name")
				return
			}
			m.Path = p.Value
			return
		}
		if _, ok := keys["kind"]; ok {
			m.Object = n
			return
		}
		if _, ok := keys["apiVersion"]; ok {
			m.Object = n
			return
		}
	}
	d.fail(n, path, "want `path: FILE` or a Kubernetes object (apiVersion, kind, metadata, ...), got %s", describeNode(n))
}

var durationRE = regexp.MustCompile(`^[0-9.]+(ns|us|µs|ms|s|m|h)`)

func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || !durationRE.MatchString(s) {
		return 0, fmt.Errorf("want a duration such as 30s, 1m30s or 250ms, got %q", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("want a duration of zero or more, got %q", s)
	}
	return d, nil
}

// suggest returns the name closest to s (edit distance at most 2, or a shared prefix).
func suggest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		d := editDistance(strings.ToLower(s), n)
		if d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		for _, n := range names {
			if len(s) >= 3 && (strings.HasPrefix(n, s) || strings.HasPrefix(s, n)) {
				return n
			}
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
