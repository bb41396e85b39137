package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
)

// fakeIPT is a small state-based Interface for tests (in the spirit of kube-proxy's
// FakeIPTables): it holds tables of chains of rule texts, applies restore input with
// iptables-restore's semantics (--noflush chain-line flushes, -A, -I, -X, COMMIT),
// rejects what the kernel rejects (appending to a missing chain, jumping to a missing
// chain, deleting a chain still referenced), applies all or nothing, records every
// Restore, and dumps its state as iptables-save does.
type fakeIPT struct {
	tables   map[string]*fakeTable
	restores []fakeRestore
	saves    int
	saveErr  error
}

type fakeRestore struct {
	data string
	opts RestoreOptions
	err  error
}

type fakeTable struct {
	chains map[string][]string // chain -> rule specs (after "-A CHAIN ")
}

var builtinChains = map[string][]string{
	TableFilter: {"INPUT", "FORWARD", "OUTPUT"},
	TableNAT:    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	TableMangle: {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
}

var builtinTargets = map[string]bool{
	"ACCEPT": true, "DROP": true, "RETURN": true, "REJECT": true, "DNAT": true,
	"SNAT": true, "MASQUERADE": true, "MARK": true,
}

func newFakeIPT() *fakeIPT {
	f := &fakeIPT{tables: map[string]*fakeTable{}}
	for t := range builtinChains {
		f.tables[t] = newFakeTable(t)
	}
	return f
}

func newFakeTable(name string) *fakeTable {
	t := &fakeTable{chains: map[string][]string{}}
	for _, c := range builtinChains[name] {
		t.chains[c] = nil
	}
	return t
}

func isBuiltin(table, chain string) bool { return slices.Contains(builtinChains[table], chain) }

func (f *fakeIPT) clone() map[string]*fakeTable {
	out := make(map[string]*fakeTable, len(f.tables))
	for n, t := range f.tables {
		c := &fakeTable{chains: make(map[string][]string, len(t.chains))}
		for ch, rules := range t.chains {
			c.chains[ch] = append([]string(nil), rules...)
		}
		out[n] = c
	}
	return out
}

// splitRule returns the chain and spec of "-A CHAIN spec" style lines.
func splitRule(line string) (verb, chain, spec string) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return "", "", ""
	}
	return f[0], f[1], strings.Join(f[2:], " ")
}

func jumpTarget(spec string) string {
	f := tokenize(spec)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-j" || f[i] == "-g" {
			return f[i+1]
		}
	}
	return ""
}

func (f *fakeIPT) Restore(_ context.Context, data []byte, opts RestoreOptions) error {
	err := f.apply(data, opts)
	f.restores = append(f.restores, fakeRestore{data: string(data), opts: opts, err: err})
	return err
}

func (f *fakeIPT) apply(data []byte, opts RestoreOptions) error {
	tables := f.clone()
	var cur *fakeTable
	var curName string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<26)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		fail := func(format string, a ...any) error {
			return fmt.Errorf("line %d: %s", lineNo, fmt.Sprintf(format, a...))
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			curName = line[1:]
			if builtinChains[curName] == nil {
				return fail("unknown table %q", curName)
			}
			if !opts.NoFlush {
				tables[curName] = newFakeTable(curName)
			}
			cur = tables[curName]
		case cur == nil:
			return fail("%q outside a table", line)
		case line == "COMMIT":
			if err := checkJumps(curName, cur); err != nil {
				return fail("%v", err)
			}
			cur = nil
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			cur.chains[name] = nil // create or flush
		default:
			verb, chain, spec := splitRule(line)
			if _, ok := cur.chains[chain]; !ok {
				return fail("%s: chain %s does not exist", verb, chain)
			}
			switch verb {
			case "-A":
				cur.chains[chain] = append(cur.chains[chain], spec)
			case "-I":
				cur.chains[chain] = append([]string{spec}, cur.chains[chain]...)
			case "-X":
				if isBuiltin(curName, chain) {
					return fail("-X %s: built-in chain", chain)
				}
				for other, rules := range cur.chains {
					for _, r := range rules {
						if jumpTarget(r) == chain {
							return fail("CHAIN_DEL failed (Device or resource busy): %s is referenced from %s", chain, other)
						}
					}
				}
				if len(cur.chains[chain]) > 0 {
					return fail("-X %s: chain not empty", chain)
				}
				delete(cur.chains, chain)
			default:
				return fail("unsupported command %q", verb)
			}
		}
	}
	if cur != nil {
		return fmt.Errorf("missing COMMIT in table %s", curName)
	}
	f.tables = tables
	return nil
}

func checkJumps(table string, t *fakeTable) error {
	for chain, rules := range t.chains {
		for _, r := range rules {
			tgt := jumpTarget(r)
			if tgt == "" || builtinTargets[tgt] {
				continue
			}
			if _, ok := t.chains[tgt]; !ok {
				return fmt.Errorf("%s/%s jumps to missing chain %s", table, chain, tgt)
			}
		}
	}
	return nil
}

func (f *fakeIPT) Save(_ context.Context, tables ...string) ([]byte, error) {
	f.saves++
	if f.saveErr != nil {
		return nil, f.saveErr
	}
	if len(tables) == 0 {
		tables = []string{TableFilter, TableMangle, TableNAT}
	}
	var b strings.Builder
	for _, name := range tables {
		t := f.tables[name]
		if t == nil {
			continue
		}
		b.WriteString("*" + name + "\n")
		for _, c := range f.chainOrder(name) {
			pol := "-"
			if isBuiltin(name, c) {
				pol = "ACCEPT"
			}
			fmt.Fprintf(&b, ":%s %s [0:0]\n", c, pol)
		}
		for _, c := range f.chainOrder(name) {
			for _, r := range t.chains[c] {
				b.WriteString("-A " + c + " " + r + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return []byte(b.String()), nil
}

// chainOrder lists built-in chains first, then user chains alphabetically (as
// iptables-nft-save does).
func (f *fakeIPT) chainOrder(table string) []string {
	t := f.tables[table]
	out := append([]string{}, builtinChains[table]...)
	var user []string
	for c := range t.chains {
		if !isBuiltin(table, c) {
			user = append(user, c)
		}
	}
	slices.Sort(user)
	return append(out, user...)
}

// rules returns the specs of a chain.
func (f *fakeIPT) rules(table, chain string) []string { return f.tables[table].chains[chain] }

func (f *fakeIPT) hasChain(table, chain string) bool {
	_, ok := f.tables[table].chains[chain]
	return ok
}

var _ Interface = (*fakeIPT)(nil)
