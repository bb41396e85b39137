package emulator

import (
	"errors"
	"fmt"
	"strings"
)

// ParseIPSets parses the output of `ipset save` or of `ipset list` (`ipset -L`),
// whichever it is: list output starts with a "Name:" line.
func ParseIPSets(data []byte, file string) (*IPSets, error) {
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "Name:") {
			return ParseIPSetList(data, file)
		}
		break
	}
	return ParseIPSetSave(data, file)
}

// ParseIPSetList parses `ipset list` output: per set a header (Name, Type, Revision,
// Header with the create options, Size in memory, References, Number of entries) and
// its Members, one a line, sets separated by blank lines. It builds the same sets as
// the equivalent `ipset save` output would; errors name the line of the list.
func ParseIPSetList(data []byte, file string) (*IPSets, error) {
	var save []string
	var origin []int // the list line of each save line
	lines := strings.Split(string(data), "\n")
	perr := func(n int, format string, args ...any) error {
		return &ParseError{File: file, Line: n + 1, Err: fmt.Errorf(format, args...)}
	}
	var name, typ string
	var nameLine int
	inMembers := false
	flushCreate := func(header string, n int) {
		save = append(save, strings.TrimSpace("create "+name+" "+typ+" "+header))
		origin = append(origin, n)
	}
	created := false
	for n, raw := range lines {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			if line == "" {
				inMembers = false
			}
			continue
		}
		if inMembers {
			save = append(save, "add "+name+" "+line)
			origin = append(origin, n)
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			return nil, perr(n, "want a \"Key: value\" header line of ipset list output, got %q", line)
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Name":
			if name != "" && !created {
				return nil, perr(nameLine, "set %s has no Type and Header lines", name)
			}
			name, typ, nameLine, created = val, "", n, false
			if name == "" {
				return nil, perr(n, "Name: no set name")
			}
		case "Type":
			if name == "" {
				return nil, perr(n, "Type before Name")
			}
			typ = val
		case "Header":
			if name == "" || typ == "" {
				return nil, perr(n, "Header before Name and Type")
			}
			flushCreate(val, n)
			created = true
		case "Members":
			if name == "" {
				return nil, perr(n, "Members before Name")
			}
			if !created {
				flushCreate("", n) // a list without a Header line: the defaults
				created = true
			}
			if val != "" {
				return nil, perr(n, "Members: want the members on the lines after it, got %q", val)
			}
			inMembers = true
		case "Revision", "Size in memory", "References", "Number of entries":
		default:
			return nil, perr(n, "unknown header %q in ipset list output", key)
		}
	}
	if name != "" && !created {
		return nil, perr(nameLine, "set %s has no Type and Header lines", name)
	}
	sets, err := ParseIPSetSave([]byte(strings.Join(save, "\n")), file)
	var pe *ParseError
	if errors.As(err, &pe) && pe.Line >= 1 && pe.Line <= len(origin) {
		pe.Line = origin[pe.Line-1] + 1
	}
	return sets, err
}
