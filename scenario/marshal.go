package scenario

import (
	"bytes"
	"fmt"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/runtime"
	sigyaml "sigs.k8s.io/yaml"
)

// Marshal writes the scenario as YAML that Parse reads back.
func (s *Scenario) Marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("scenario: marshal: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("scenario: marshal: %w", err)
	}
	return b.Bytes(), nil
}

// InlineObject makes a manifests entry holding obj inline (a *corev1.Service,
// *corev1.Pod, *appsv1.Deployment, ...; apiVersion and kind must be set). Empty fields
// (null creationTimestamp, empty status) are left out.
func InlineObject(obj runtime.Object) (Manifest, error) {
	data, err := sigyaml.Marshal(obj)
	if err != nil {
		return Manifest{}, fmt.Errorf("scenario: inline object: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Manifest{}, fmt.Errorf("scenario: inline object: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return Manifest{}, fmt.Errorf("scenario: inline object: not a mapping")
	}
	n := doc.Content[0]
	prune(n)
	clearPositions(n)
	return Manifest{Object: n}, nil
}

// MustInlineObject is InlineObject for objects known to marshal; it panics otherwise.
func MustInlineObject(obj runtime.Object) Manifest {
	m, err := InlineObject(obj)
	if err != nil {
		panic(err)
	}
	return m
}

// prune drops null values and empty mappings from mappings, recursively.
func prune(n *yaml.Node) bool {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Tag == "!!null"
	case yaml.MappingNode:
		var keep []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if prune(n.Content[i+1]) {
				continue
			}
			keep = append(keep, n.Content[i], n.Content[i+1])
		}
		n.Content = keep
		return len(keep) == 0
	case yaml.SequenceNode:
		for _, c := range n.Content {
			prune(c)
		}
	}
	return false
}

func clearPositions(n *yaml.Node) {
	n.Line, n.Column = 0, 0
	n.Style &^= yaml.FlowStyle
	for _, c := range n.Content {
		clearPositions(c)
	}
}
