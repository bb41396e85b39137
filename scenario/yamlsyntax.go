package scenario

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// A YAML syntax error as yaml.v3 reports it names a line, but for most mistakes of
// indentation that line is where the enclosing block began ("line 2: did not find
// expected key" for a key mis-indented on line 6), and an unclosed quote is reported at
// the end of the file. syntaxError finds the line itself: the text up to the line before
// the culprit parses, the text up to the culprit does not. It scans prefixes from the
// end, so a construct that only a truncation breaks (a flow list or a quoted string over
// several lines) is not taken for the culprit. The field named is the last key that
// parsed before the culprit (or the key the culprit line starts with, when that parses).

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// maxSyntaxScan bounds the prefix scan: beyond it the parser's own line is reported.
const maxSyntaxScan = 4 << 20 // bytes parsed in all

// yamlError turns a yaml.v3 error about data into an *Error at the culprit line.
func yamlError(name string, data []byte, err error) error {
	line, msg := splitYAMLError(err)
	e := &Error{File: name, Line: line}
	if l, m, field, ok := findSyntaxError(data); ok {
		e.Line, msg, e.Field = l, m, field
	}
	e.Msg = "invalid YAML: " + msg
	if h := syntaxHint(msg, lineText(data, e.Line)); h != "" {
		e.Msg += " (" + h + ")"
	}
	return e
}

func splitYAMLError(err error) (int, string) {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return line, msg[len(m[0]):]
	}
	return 0, strings.TrimPrefix(msg, "yaml: ")
}

// parseYAML parses every document of data into nodes, or returns the first error.
func parseYAML(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, &n)
	}
}

// lineStarts returns the offsets at which data's lines start, and len(data) after the last.
func lineStarts(data []byte) []int {
	starts := []int{0}
	for i, c := range data {
		if c == '\n' && i+1 < len(data) {
			starts = append(starts, i+1)
		}
	}
	return append(starts, len(data))
}

func lineText(data []byte, line int) string {
	starts := lineStarts(data)
	if line < 1 || line >= len(starts) {
		return ""
	}
	return strings.TrimRight(string(data[starts[line-1]:starts[line]]), "\r\n")
}

// findSyntaxError returns the first line whose text breaks the YAML, the parser's
// message for the text up to that line, and the field path of the last key before it.
func findSyntaxError(data []byte) (line int, msg, field string, ok bool) {
	starts := lineStarts(data)
	n := len(starts) - 1 // lines
	budget := maxSyntaxScan
	// The largest k such that lines 1..k-1 parse: line k is the culprit.
	var good []*yaml.Node
	k := 0
	for j := n - 1; j >= 0; j-- {
		prefix := data[:starts[j]]
		budget -= len(prefix)
		if budget < 0 {
			return 0, "", "", false
		}
		if docs, err := parseYAML(prefix); err == nil {
			good, k = docs, j+1
			break
		}
	}
	if k == 0 {
		return 0, "", "", false
	}
	withLine := data[:starts[k]]
	_, err := parseYAML(withLine)
	if err == nil {
		// Only more lines break it (something the culprit opened and never closed is
		// caught above as a failing prefix); report the parser's own message.
		_, err = parseYAML(data)
		if err == nil {
			return 0, "", "", false
		}
	}
	_, msg = splitYAMLError(err)
	field = lastKeyBefore(good, k)
	// The culprit line's own key, when the line up to its key parses (an unclosed quote
	// in a value, a bad flow list): name that field rather than the one before.
	if m := keyLineRE.FindSubmatch(data[starts[k-1]:starts[k]]); m != nil {
		probe := append(append([]byte{}, data[:starts[k-1]]...), m[1]...)
		probe = append(probe, " ~\n"...)
		if docs, err := parseYAML(probe); err == nil {
			if f := lastKeyBefore(docs, k+1); f != "" {
				field = f
			}
		}
	}
	return k, msg, field, true
}

// keyLineRE matches a line that starts with a plain key: "  - from: ..." → "  - from:".
var keyLineRE = regexp.MustCompile(`^([ ]*(?:- +)*[A-Za-z_][A-Za-z0-9_.\-/]*:)(?:[ \t]|\r?\n|$)`)

// lastKeyBefore returns the field path of the last mapping key on a line before line.
func lastKeyBefore(docs []*yaml.Node, line int) string {
	last := ""
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		if n == nil || n.Line >= line {
			return
		}
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if k.Line >= line {
					return
				}
				p := join(path, k.Value)
				last = p
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				if c.Line >= line {
					return
				}
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	for _, d := range docs {
		walk(d, "")
	}
	return last
}

// syntaxHint says in plain words what usually causes a parser message.
func syntaxHint(msg, text string) string {
	switch {
	case strings.Contains(msg, "found character that cannot start any token") && strings.ContainsRune(text, '\t'):
		return "a tab: YAML indents with spaces only"
	case strings.Contains(msg, "found unexpected end of stream"),
		strings.Contains(msg, "did not find expected ',' or ']'"),
		strings.Contains(msg, "did not find expected ',' or '}'"):
		return "a quote, [ or { opened on this line is not closed"
	case strings.Contains(msg, "did not find expected key"),
		strings.Contains(msg, "mapping values are not allowed"),
		strings.Contains(msg, "did not find expected '-' indicator"),
		strings.Contains(msg, "block sequence entries are not allowed"),
		strings.Contains(msg, "did not find expected <document start>"),
		strings.Contains(msg, "could not find expected ':'"):
		return "check the indentation of this line against the lines above it"
	}
	return ""
}
