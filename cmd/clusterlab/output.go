package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// Output formats: every command with -o json takes -o yaml too, the same document in
// YAML (the JSON field names, converted by sigs.k8s.io/yaml as kubectl does).

// checkOutput validates an -o value.
func checkOutput(output string) error {
	switch output {
	case "text", "json", "yaml":
		return nil
	}
	return badInput(fmt.Errorf("-o %q: want text, json or yaml", output))
}

// structured reports whether output is a machine format (json or yaml).
func structured(output string) bool { return output == "json" || output == "yaml" }

// writeStructured writes a JSON document as output says: as is for json, converted for
// yaml.
func writeStructured(w io.Writer, output string, js []byte) error {
	if output == "yaml" {
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			return err
		}
		js = y
	}
	_, err := w.Write(js)
	return err
}

// writeValue marshals v as indented JSON (or YAML) to w.
func writeValue(w io.Writer, output string, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return writeStructured(w, output, b.Bytes())
}
