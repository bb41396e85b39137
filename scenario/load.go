package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Load reads and checks a scenario file: its structure, every field, and the manifests
// it names (decoded, defaulted and validated). Manifest paths are relative to the file.
// Errors name the file, the line and the field (*Error, several joined with errors.Join).
func Load(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Msg: cleanOSError(err)}
	}
	return Parse(path, data)
}

// Parse reads and checks a scenario from YAML text. name is the file name used in
// messages and the base of relative manifest paths.
func Parse(name string, data []byte) (*Scenario, error) {
	s, err := decodeScenario(name, data)
	if err != nil {
		return nil, err
	}
	if _, err := s.prepare(""); err != nil {
		return nil, err
	}
	return s, nil
}

// decodeScenario decodes the YAML into a Scenario without checking more than types.
func decodeScenario(name string, data []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if err == io.EOF {
			return nil, &Error{File: name, Msg: "the file is empty: want a scenario (name, cluster, manifests, steps)"}
		}
		return nil, yamlError(name, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		line := extra.Line
		if len(extra.Content) > 0 {
			line = extra.Content[0].Line
		}
		return nil, &Error{File: name, Line: line, Msg: "a scenario file holds one YAML document; put manifests under manifests: or in their own files"}
	} else if err != io.EOF {
		return nil, yamlError(name, data, err)
	}
	s := &Scenario{File: name, src: data}
	if name != "" {
		s.Dir = filepath.Dir(name)
	}
	d := &decoder{file: name, lines: map[string]int{}}
	d.decode(&root, reflect.ValueOf(s).Elem(), "")
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	s.lines = d.lines
	return s, nil
}

func cleanOSError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// lineOf returns the line of a field path, or of its nearest ancestor that has one.
func (s *Scenario) lineOf(path string) int {
	for path != "" {
		if l, ok := s.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// errorf makes an *Error about a field.
func (s *Scenario) errorf(path, format string, args ...any) *Error {
	return &Error{File: s.File, Line: s.lineOf(path), Field: path, Msg: fmt.Sprintf(format, args...)}
}
