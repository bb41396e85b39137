package dns

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/clusterlab/clusterlab/service"
)

// servedKinds are the kinds `dns serve` reads (Node is read and ignored);
// documents and List items of other kinds (Deployments, ConfigMaps, ... as
// `kubectl get all -o yaml` prints them) are skipped.
var servedKinds = map[string]bool{
	service.KindService: true, service.KindPod: true, service.KindNode: true,
	service.KindNamespace: true, service.KindEndpoints: true, service.KindEndpointSlice: true,
}

// served reports whether a document of this kind goes to service.Load: a
// served kind, a typed list of one, a List (whose items are filtered), or no
// kind at all (service.Load reports that).
func served(kind string) bool {
	if kind == "" || kind == "List" || servedKinds[kind] {
		return true
	}
	k, ok := strings.CutSuffix(kind, "List")
	return ok && servedKinds[k]
}

// loadManifests is service.LoadPaths for `dns serve`: the same files (a
// directory's *.yaml, *.yml and *.json), strict decoding with file:line
// errors, but documents and List items of kinds it does not serve are
// skipped and counted by kind instead of being errors. The objects read are
// then validated (validateManifests): any problem fails the whole load.
func loadManifests(paths []string) ([]service.Manifest, map[string]int, error) {
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
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
				if !e.IsDir() {
					names = append(names, e.Name())
				}
			}
		}
		sort.Strings(names)
		for _, n := range names {
			files = append(files, filepath.Join(p, n))
		}
	}
	skipped := map[string]int{}
	var out []service.Manifest
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ms, err := service.Load(f, dropUnserved(data, skipped))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, ms...)
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	if err := validateManifests(out); err != nil {
		return nil, nil, err
	}
	return out, skipped, nil
}

// validateManifests is service.ValidateManifests.
func validateManifests(ms []service.Manifest) error { return service.ValidateManifests(ms) }

// dropUnserved removes the documents and List items of kinds `dns serve`
// does not read, counting them in skipped. YAML keeps its line numbers (the
// lines are blanked); JSON is re-encoded only when something was dropped.
// Anything it cannot make sense of is left for service.Load to report.
func dropUnserved(data []byte, skipped map[string]int) []byte {
	if service.IsJSON(data) { // not a YAML flow mapping ({kind: Service, ...})
		return dropUnservedJSON(data, skipped)
	}
	lines := strings.SplitAfter(string(data), "\n")
	blank := func(from, to int) { // line indexes, inclusive
		for i := max(from, 0); i <= to && i < len(lines); i++ {
			if strings.HasSuffix(lines[i], "\n") {
				lines[i] = "\n"
			} else {
				lines[i] = ""
			}
		}
	}
	process := func(start, end int) {
		if end <= start {
			return
		}
		var root yaml.Node
		if err := yaml.Unmarshal([]byte(strings.Join(lines[start:end], "")), &root); err != nil ||
			root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
			return
		}
		doc := root.Content[0]
		abs := func(line int) int { return start + line - 1 }
		kind := scalarValue(doc, "kind")
		if !served(kind) {
			from := start
			if yamlMarker.MatchString(strings.TrimRight(lines[start], "\r\n")) {
				lines[start] = "---\n" // the marker stays: document numbers stay right
				from++
			}
			blank(from, end-1)
			skipped[kind]++
			return
		}
		if kind != "List" {
			return
		}
		var items *yaml.Node
		next := end - 1 // last line index of the items' block
		for i := 0; i+1 < len(doc.Content); i += 2 {
			if doc.Content[i].Value == "items" {
				items = doc.Content[i+1]
				if i+2 < len(doc.Content) {
					next = abs(doc.Content[i+2].Line) - 1
				}
			}
		}
		if items == nil || items.Kind != yaml.SequenceNode || items.Style&yaml.FlowStyle != 0 {
			return
		}
		for i, it := range items.Content {
			k := scalarValue(it, "kind")
			if served(k) || it.Kind != yaml.MappingNode {
				continue
			}
			last := next
			if i+1 < len(items.Content) {
				last = abs(items.Content[i+1].Line) - 1
			}
			if i > 0 && items.Content[i-1].Line == it.Line || last < abs(it.Line) {
				continue // several items on a line: leave it to service.Load
			}
			blank(abs(it.Line), last)
			skipped[k]++
		}
	}
	docStart := 0
	for i, ln := range lines {
		if yamlMarker.MatchString(strings.TrimRight(ln, "\r\n")) {
			process(docStart, i)
			docStart = i
		}
	}
	process(docStart, len(lines))
	return []byte(strings.Join(lines, ""))
}

var yamlMarker = regexp.MustCompile(`^---([ \t].*)?$`)

func scalarValue(m *yaml.Node, key string) string {
	if m == nil || m.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key && m.Content[i+1].Kind == yaml.ScalarNode {
			return m.Content[i+1].Value
		}
	}
	return ""
}

func dropUnservedJSON(data []byte, skipped map[string]int) []byte {
	dec := json.NewDecoder(bytes.NewReader(data))
	var docs []map[string]json.RawMessage
	changed := false
	kindOf := func(raw json.RawMessage) string {
		var tm struct {
			Kind string `json:"kind"`
		}
		_ = json.Unmarshal(raw, &tm)
		return tm.Kind
	}
	for {
		var doc map[string]json.RawMessage
		if err := dec.Decode(&doc); err == io.EOF {
			break
		} else if err != nil {
			return data // service.Load reports it
		}
		var kind string
		_ = json.Unmarshal(doc["kind"], &kind)
		if !served(kind) {
			skipped[kind]++
			changed = true
			continue
		}
		if kind == "List" {
			var items []json.RawMessage
			if err := json.Unmarshal(doc["items"], &items); err == nil {
				kept := items[:0]
				for _, it := range items {
					if k := kindOf(it); !served(k) {
						skipped[k]++
						changed = true
						continue
					}
					kept = append(kept, it)
				}
				if b, err := json.Marshal(kept); err == nil {
					doc["items"] = b
				}
			}
		}
		docs = append(docs, doc)
	}
	if !changed {
		return data
	}
	var b bytes.Buffer
	for _, d := range docs {
		out, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return data
		}
		b.Write(out)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// skippedNote says what dropUnserved left out, or "" when nothing.
func skippedNote(skipped map[string]int) string {
	if len(skipped) == 0 {
		return ""
	}
	var kinds []string
	for k := range skipped {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		name := k
		if name == "" {
			name = "(no kind)"
		} else if q := strconv.Quote(k); q[1:len(q)-1] != k {
			name = q // a control byte from the input, escaped
		}
		parts = append(parts, fmt.Sprintf("%d %s", skipped[k], name))
	}
	return "skipped objects of kinds dns serve does not read: " + strings.Join(parts, ", ")
}
