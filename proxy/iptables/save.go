package iptables

import (
	"bytes"
	"strings"
)

// Saved is what iptables-save output says a node has: per table, the chains it
// declares (in the order first declared) and the rules of each chain. It is the one
// reader of iptables-save text the proxiers use to learn which of their chains and jump
// rules already exist (this package's Proxier, proxy/userspace and proxy/ipvs); the
// emulator parses the same text fully, to evaluate it.
type Saved struct {
	tables map[string]*savedTable
	order  []string
}

type savedTable struct {
	chains map[string]bool
	order  []string
	rules  map[string][]string // chain → rule specs after "-A CHAIN", single-spaced
}

// ParseSave reads iptables-save output leniently, the way a proxier looks at a node
// that other software shares:
//
//	*TABLE                      starts (or, named again, continues) a table
//	:CHAIN POLICY [p:b]         declares CHAIN in the current table
//	[p:b] -A CHAIN SPEC         a rule (the counters of iptables-save -c are dropped)
//	-A CHAIN SPEC               a rule
//
// Lines are trimmed of surrounding blanks. Anything else — comments, COMMIT, blank
// lines, other commands, lines before the first table — is skipped, so ParseSave never
// fails: a line it does not understand cannot be a chain or rule a proxier looks for.
func ParseSave(data []byte) *Saved {
	s := &Saved{tables: map[string]*savedTable{}}
	var cur *savedTable
	for len(data) > 0 {
		var raw []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			raw, data = data[:i], data[i+1:]
		} else {
			raw, data = data, nil
		}
		line := strings.TrimSpace(string(raw))
		switch {
		case strings.HasPrefix(line, "*"):
			cur = s.table(line[1:])
		case cur == nil:
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if !cur.chains[name] {
				cur.chains[name] = true
				cur.order = append(cur.order, name)
			}
		default:
			cur.addRule(line)
		}
	}
	return s
}

// table returns the table called name, creating it on first use.
func (s *Saved) table(name string) *savedTable {
	if t, ok := s.tables[name]; ok {
		return t
	}
	t := &savedTable{chains: map[string]bool{}, rules: map[string][]string{}}
	s.tables[name] = t
	s.order = append(s.order, name)
	return t
}

// addRule records line if it is a rule ("-A CHAIN ...", optionally after counters).
func (t *savedTable) addRule(line string) {
	if strings.HasPrefix(line, "[") {
		if i := strings.Index(line, "]"); i >= 0 {
			line = strings.TrimSpace(line[i+1:])
		}
	}
	f := strings.Fields(line)
	if len(f) >= 2 && f[0] == "-A" {
		t.rules[f[1]] = append(t.rules[f[1]], strings.Join(f[2:], " "))
	}
}

// Tables returns the names of the tables, in the order they first appear.
func (s *Saved) Tables() []string { return append([]string(nil), s.order...) }

// HasChain reports whether table declares chain (a ":CHAIN" line).
func (s *Saved) HasChain(table, chain string) bool {
	t := s.tables[table]
	return t != nil && t.chains[chain]
}

// ChainNames returns the chains table declares, each once, in the order first
// declared; nil for a table the text does not have.
func (s *Saved) ChainNames(table string) []string {
	t := s.tables[table]
	if t == nil {
		return nil
	}
	return append([]string(nil), t.order...)
}

// Rules returns the rules of chain in table as iptables-save prints them after
// "-A CHAIN", blanks collapsed to single spaces, in order.
func (s *Saved) Rules(table, chain string) []string {
	t := s.tables[table]
	if t == nil {
		return nil
	}
	return append([]string(nil), t.rules[chain]...)
}

// HasRule reports whether chain in table has a rule spelled spec (compared with blanks
// collapsed, so the spacing of spec does not matter).
func (s *Saved) HasRule(table, chain, spec string) bool {
	t := s.tables[table]
	if t == nil {
		return false
	}
	want := strings.Join(strings.Fields(spec), " ")
	for _, r := range t.rules[chain] {
		if r == want {
			return true
		}
	}
	return false
}

// Jumps reports whether some rule of chain in table jumps to target ("-j TARGET" or
// "--jump TARGET"), whatever else the rule says.
func (s *Saved) Jumps(table, chain, target string) bool {
	t := s.tables[table]
	if t == nil {
		return false
	}
	for _, r := range t.rules[chain] {
		f := strings.Fields(r)
		for i := 0; i+1 < len(f); i++ {
			if (f[i] == "-j" || f[i] == "--jump") && f[i+1] == target {
				return true
			}
		}
	}
	return false
}
