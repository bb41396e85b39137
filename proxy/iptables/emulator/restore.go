package emulator

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/clusterlab/clusterlab/netfilter"
)

// memoMinRules is the length from which a chain keeps the lines it was built from
// (chainSrc): kube-proxy rewrites its long top-level chains (KUBE-SERVICES: a rule per
// service port) whole on every sync, mostly with the same lines.
const memoMinRules = 16

// chainSrc is the text a chain's rules were parsed from: line i (an -A command)
// gave Rules[first[i]:end[i]] (lines whose rules cannot be reused are left out).
// The lines are in text one after the other, each ended by '\n' as in a restore's
// input, so that a run of them can be compared with the input at once.
type chainSrc struct {
	text       string
	off        []int32
	first, end []int32
}

func (s *chainSrc) lines() int        { return len(s.off) - 1 }
func (s *chainSrc) line(i int) string { return s.text[s.off[i] : s.off[i+1]-1] }

// chainBuild follows a chain a transaction builds from empty with -A lines only
// (Chain.clean) whose version before it flushed has a chainSrc (memo): a line equal to
// one of memo's reuses its rules.
type chainBuild struct {
	memo  *Chain
	next  int // the line of memo expected next
	index map[string]int32
	// same counts the lines so far, all equal to memo's first lines in order
	// (diverged: not so), when the chain keeps memo's chainSrc.
	same     int
	diverged bool
	slab     []Rule // room for the new rules over memo's Specs
}

// sourceOf returns the chainSrc of a chain the transaction built from empty with -A
// lines only: its rules' lines (their Line numbers in the input), those whose rules
// may be reused (memoizable), in one copy of their text.
func (tx *txn) sourceOf(c *Chain) *chainSrc {
	if tx.lineStart == nil {
		tx.lineStart = make([]int32, 1, strings.Count(tx.text, "\n")+1)
		for i := 0; ; {
			j := strings.IndexByte(tx.text[i:], '\n')
			if j < 0 {
				break
			}
			i += j + 1
			tx.lineStart = append(tx.lineStart, int32(i))
		}
	}
	s := &chainSrc{}
	var sb strings.Builder
	if n := len(c.Rules); n > 0 {
		// Room for lines as long as the last rule's (lines of a chain are alike).
		if l := c.Rules[n-1].Line; c.Rules[n-1].File == tx.opts.File && l >= 1 && l < len(tx.lineStart) {
			sb.Grow(n * int(tx.lineStart[l]-tx.lineStart[l-1]) * 9 / 8)
		}
	}
	for i := 0; i < len(c.Rules); {
		r := c.Rules[i]
		j := i + 1
		for j < len(c.Rules) && c.Rules[j].Line == r.Line && c.Rules[j].File == r.File {
			j++
		}
		if r.File == tx.opts.File && r.Line >= 1 && r.Line <= len(tx.lineStart) && memoizable(c.Rules[i:j]) {
			start, end := int(tx.lineStart[r.Line-1]), len(tx.text)
			if r.Line < len(tx.lineStart) {
				end = int(tx.lineStart[r.Line])
			}
			line := trimLine(tx.text[start:end])
			s.off = append(s.off, int32(sb.Len()))
			s.first, s.end = append(s.first, int32(i)), append(s.end, int32(j))
			sb.WriteString(line)
			sb.WriteByte('\n')
		}
		i = j
	}
	if len(s.first) == 0 {
		return nil
	}
	s.off = append(s.off, int32(sb.Len()))
	s.text = sb.String()
	return s
}

// trimLine is a restore line without its line end and surrounding blanks.
func trimLine(line string) string {
	j := len(line)
	for j > 0 && (line[j-1] == ' ' || line[j-1] == '\t' || line[j-1] == '\r' || line[j-1] == '\n') {
		j--
	}
	i := 0
	for i < j && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	return line[i:j]
}

// ParseError is an error in iptables-save / iptables-restore text: the file (or input
// name), the line, the option at fault when there is one, and what is wrong.
type ParseError struct {
	File   string
	Line   int
	Option string
	Err    error
}

func (e *ParseError) Error() string {
	f := e.File
	if f == "" {
		f = "<input>"
	}
	s := fmt.Sprintf("%s:%d: ", f, e.Line)
	if e.Option != "" {
		s += e.Option + ": "
	}
	return s + e.Err.Error()
}

func (e *ParseError) Unwrap() error { return e.Err }

// Sentinel errors, for errors.Is.
var (
	ErrChainNotFound = errors.New("chain does not exist")
	ErrChainBusy     = errors.New("chain is not empty or still referenced (CHAIN_DEL: device or resource busy)")
	ErrChainExists   = errors.New("chain already exists")
	ErrLoop          = errors.New("chain loop")
	ErrNoCommit      = errors.New("COMMIT expected")
)

// RestoreOptions are iptables-restore's flags, plus the input's name for errors and
// rule origins.
type RestoreOptions struct {
	// NoFlush (--noflush) keeps what is not mentioned: only user chains declared with a
	// ":CHAIN" line are flushed; built-in chain lines only set the policy. Without it,
	// every table named in the input is replaced whole (and, as the nf_tables backend
	// does, its built-in policies are reset to ACCEPT unless the input sets them).
	NoFlush bool
	// Counters (--counters) loads [packets:bytes] counters from the input.
	Counters bool
	// File names the input in errors and in the rules' origin.
	File string

	// Lenient skips what cannot be loaded instead of refusing the whole input, as
	// dumps of broken nodes need: a line that does not parse (and the lines of a
	// table whose header does not), a rule that jumps to a missing chain or closes a
	// loop; a table without COMMIT is taken as committed. Each is reported as a
	// SkippedLine (see Skipped).
	Lenient bool

	// keepOrder appends new tables in input order (loading a dump) instead of placing
	// them in the nf_tables backend's order.
	keepOrder bool
	// wholeTables validates every table the input names whole, as a restore of an
	// unvalidated ruleset does (tests compare it with the incremental validation).
	wholeTables bool
	// noMemo parses every line, reusing no rules of a chain's version before (tests
	// compare it with the reuse, memoLine).
	noMemo bool
	// noPreParse parses every line in the transaction's goroutine (tests compare).
	noPreParse bool
}

// SkippedLine is a line a lenient load left out, and why.
type SkippedLine struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Text   string `json:"text"`
	Reason string `json:"reason"`
	// Table and Chain are where the line would have gone, as far as it says ("" when
	// not known): an outcome that did not pass there cannot have been changed by it.
	Table string `json:"table,omitempty"`
	Chain string `json:"chain,omitempty"`
}

// nftTableRank is the order iptables-nft-save prints tables in.
var nftTableRank = map[string]int{TableMangle: 0, TableSecurity: 1, TableRaw: 2, TableFilter: 3, TableNAT: 4}

// Restore applies iptables-restore input to rs and returns the resulting ruleset; rs
// itself is not changed (rules and chains that the input does not touch are shared).
// Either the whole input applies or an error is returned.
func Restore(rs *Ruleset, data []byte, opts RestoreOptions) (*Ruleset, error) {
	out, _, err := RestoreSkipping(rs, data, opts)
	return out, err
}

// RestoreSkipping is Restore that also returns what a lenient restore
// (opts.Lenient) left out.
func RestoreSkipping(rs *Ruleset, data []byte, opts RestoreOptions) (*Ruleset, []SkippedLine, error) {
	tx, err := restoreTxn(rs, data, opts)
	if err != nil {
		return nil, nil, err
	}
	return tx.rs, tx.skipped, nil
}

// restoreTxn runs a restore and returns its transaction (the result, what it skipped,
// what it changed).
func restoreTxn(rs *Ruleset, data []byte, opts RestoreOptions) (*txn, error) {
	tx := newTxn(rs, opts)
	text := ""
	if opts.NoFlush && slices.ContainsFunc(rs.Tables, func(t *Table) bool { return t.memo }) {
		// A restore into tables with long chains it may rebuild from their lines
		// (kube-proxy's syncs after the first) reads the input in place and copies
		// only the lines it keeps: most of those chains' lines are the version
		// before's (memoRules).
		text, tx.inPlace = unsafe.String(unsafe.SliceData(data), len(data)), true
	} else {
		text = string(data)
	}
	if err := tx.run(text); err != nil {
		return nil, err
	}
	slices.SortStableFunc(tx.skipped, func(a, b SkippedLine) int { return a.Line - b.Line })
	return tx, nil
}

// ParseDump parses iptables-save output (with or without -c counters) into a new
// ruleset of the given family.
func ParseDump(data []byte, f Family, file string) (*Ruleset, error) {
	return Restore(NewRuleset(f), data, RestoreOptions{Counters: true, File: file, keepOrder: true})
}

type tableState struct {
	t *Table
	// prev is the table of the restore's input ruleset (nil when it has none): its
	// chains that t no longer holds are gone at commit.
	prev *Table
	// base, when not nil, is the validated version t derives from (a --noflush
	// restore): the restore then counts references and validates only what it
	// changes (incremental). nil (or full set) when t is validated whole.
	base *Table
	full bool
	// owned lists the chains the transaction made (copies of base's it changed, and
	// new ones), deleted the names it deleted.
	owned   []*Chain
	deleted []string
	// refs counts the references (jumps, gotos) to each user chain when t is
	// validated whole. It is built on first use (deleting or renaming a chain) from
	// the table as it stands, then kept up to date by every rule added or removed;
	// nil until then, so that a restore that deletes no chain does not count the
	// references of a whole ruleset.
	refs map[string]int
	// Incremental: baseRefs are base's counts, delta the changes since (nil until
	// first needed, then kept up to date like refs).
	baseRefs *refIndex
	delta    map[string]int32
}

func (ts *tableState) incremental() bool { return ts.base != nil && !ts.full }

// countRefs builds refs from the table's rules, if it is not built yet.
func (ts *tableState) countRefs() {
	if ts.refs != nil {
		return
	}
	ts.refs = countJumps[int](ts.t)
}

// countJumps counts the jumps to each chain of t.
func countJumps[N int | int32](t *Table) map[string]N {
	refs := make(map[string]N)
	for _, c := range t.AllChains() {
		for _, r := range c.Rules {
			if j, ok := r.Target.(*JumpTarget); ok {
				refs[j.Chain]++
			}
		}
	}
	return refs
}

// refCount returns the number of jumps to chain in the table as it stands.
func (ts *tableState) refCount(chain string) int {
	if !ts.incremental() {
		ts.countRefs()
		return ts.refs[chain]
	}
	ts.startDelta()
	return int(ts.baseRefs.get(chain) + ts.delta[chain])
}

// startDelta makes the incremental counts: base's (counted once per table lineage,
// then carried from version to version) and the changes the transaction made so far.
func (ts *tableState) startDelta() {
	if ts.delta != nil {
		return
	}
	if ts.base.refs == nil {
		ts.base.refs = &refIndex{over: countJumps[int32](ts.base)}
	}
	ts.baseRefs = ts.base.refs
	ts.delta = make(map[string]int32)
	for _, name := range ts.touched() {
		var old, cur []*Rule
		if c := ts.base.Chain(name); c != nil {
			old = c.Rules
		}
		if c := ts.t.Chain(name); c != nil {
			cur = c.Rules
		}
		jumpDelta(ts.delta, old, cur)
	}
}

// touched returns the names of the chains the transaction changed, created or
// deleted, each once.
func (ts *tableState) touched() []string {
	seen := make(map[string]bool, len(ts.owned)+len(ts.deleted))
	out := make([]string, 0, len(ts.owned)+len(ts.deleted))
	for _, c := range ts.owned {
		if !seen[c.Name] {
			seen[c.Name] = true
			out = append(out, c.Name)
		}
	}
	for _, n := range ts.deleted {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// jumpName is the chain a rule jumps or goes to, or "".
func jumpName(r *Rule) string {
	if j, ok := r.Target.(*JumpTarget); ok {
		return j.Chain
	}
	return ""
}

// jumpDelta adds to delta the jumps of cur and subtracts those of old, pairing rules
// by position (a chain rewritten with the same jumps costs no map update).
func jumpDelta(delta map[string]int32, old, cur []*Rule) {
	for i := range max(len(old), len(cur)) {
		var a, b string
		if i < len(old) {
			a = jumpName(old[i])
		}
		if i < len(cur) {
			b = jumpName(cur[i])
		}
		if a == b {
			continue
		}
		if a != "" {
			delta[a]--
		}
		if b != "" {
			delta[b]++
		}
	}
}

// addRef records that a rule jumping to chain was added (delta 1) or removed (-1).
func (ts *tableState) addRef(chain string, delta int) {
	if ts.refs != nil {
		ts.refs[chain] += delta
	}
	if ts.delta != nil {
		ts.delta[chain] += int32(delta)
	}
}

type txn struct {
	id      uint64 // a number no other transaction has: chains it owns carry it
	rest    string // the input after the current line
	opts    RestoreOptions
	skipped []SkippedLine
	// skipTable is the table whose header a lenient load could not take: its lines
	// are skipped up to its COMMIT.
	skipTable *string
	family    Family
	// inPlace: the text run reads is the caller's input (not a copy), so a line is
	// copied before anything may keep it.
	inPlace bool
	// text is the input run reads; lineStart the offset of each line in it (made
	// when first needed, by sourceOf).
	text      string
	lineStart []int32
	orig      *Ruleset // the input ruleset
	rs        *Ruleset
	tables    map[string]*tableState
	// gone lists, after a successful run, the chains of orig the result no longer
	// holds (replaced by a changed copy, or deleted).
	gone []*Chain
	cur  *tableState
	line int
	sp   specParser
	toks []token
	// hit is the chain the last rule line named in table hitT (see ruleChain);
	// every change to which Chain a name stands for forgets it.
	hit  *Chain
	hitT *Table
	// jump is the chain the last jump checked went to, in table hitT (see jumpChain).
	jump *Chain
	// recent: chains of table hitT found last (see lookup).
	recent [64]*Chain
	// decl are the chains the chain lines of table declT declared, in order, and
	// declNext the first that no lookup has found yet (see lookup).
	decl     []*Chain
	declT    *Table
	declNext int
	// emptyFlushed are chains of the table before the transaction that it flushed
	// while they were empty (flush): a copy mut makes of one is clean.
	emptyFlushed map[*Chain]bool
	// ruleSlab holds the rule lists of chains appended to one after the other (see
	// appendRules); slabStart is where the last such chain's list starts in it.
	ruleSlab  []*Rule
	slabStart int
	nSlab     int // the last slab's size
	// pre parses -A lines ahead of run in other goroutines (see preparse.go).
	pre     *preParser
	preUsed int // the lines pre parsed that run applied (tests)
}

// appendRules appends rules to c's list (c belongs to the transaction). A restore
// appends each chain's rules line by line, mostly one chain after the other: the
// lists of such chains are carved from one slab, the last chain's growing in place,
// rather than each list growing through its own reallocations. Every list carved
// keeps its capacity equal to its length, so an append made anywhere else copies.
func (tx *txn) appendRules(c *Chain, rules []*Rule) {
	slab := tx.ruleSlab
	switch {
	case len(c.Rules) > 0 && len(slab) > tx.slabStart && &c.Rules[0] == &slab[tx.slabStart] && len(c.Rules) == len(slab)-tx.slabStart:
		// c's list is the slab's last: grow it in place.
	case len(c.Rules) == 0:
		tx.slabStart = len(slab)
	default:
		c.Rules = append(c.Rules, rules...)
		return
	}
	if cap(slab)-len(slab) < len(rules) {
		// A new slab; c's rules so far move with it.
		// Chunks grow from 16 entries to 4096 (a partial restore appending a few
		// rules allocates little), or twice c's list when that is longer.
		tx.nSlab = max(min(2*tx.nSlab, 4096), 16, 2*(len(c.Rules)+len(rules)))
		slab = append(make([]*Rule, 0, tx.nSlab), c.Rules...)
		tx.slabStart = 0
	}
	slab = append(slab, rules...)
	tx.ruleSlab = slab
	c.Rules = slab[tx.slabStart:len(slab):len(slab)]
}

// ruleChain returns the chain called name in the current table, or nil. Consecutive
// rule lines mostly name the same chain, and a line looks it up several times (memo,
// command, after placing the rules): the last chain found is kept, saving lookups in
// an index of up to 100,000s of chains.
func (tx *txn) ruleChain(name string) *Chain {
	t := tx.cur.t
	if c := tx.hit; c != nil && tx.hitT == t && c.Name == name {
		return c
	}
	c := tx.lookup(t, name)
	tx.hit = c
	return c
}

// jumpChain is ruleChain for the chain a jump goes to (kube-proxy's rules jump to
// KUBE-MARK-MASQ again and again).
func (tx *txn) jumpChain(name string) *Chain {
	t := tx.cur.t
	if c := tx.jump; c != nil && tx.hitT == t && c.Name == name {
		return c
	}
	c := tx.lookup(t, name)
	tx.jump = c
	return c
}

// lookup returns the chain called name in t, the current table, or nil. The chains
// found last are kept in recent, by two bytes of the name and its length: kube-proxy's
// generator writes a service chain's jumps to its endpoint chains just before the
// endpoint chains' own rules, which then find their chain there rather than in the
// index (a cache miss each in a 110,000-chain table). recent is 32 sets of two, the
// one used last first, so that a chain named again and again (KUBE-SERVICES,
// KUBE-MARK-MASQ) outlives one endpoint chain falling into its set. recent, hit and
// jump hold chains of table hitT; forget drops them all (hitT nil).
//
// A chain not in recent is looked for next among the declared chains around the first
// that no lookup has found yet (decl, declNext: declBehind before it, declWindow from
// it): kube-proxy declares its chains in the order its rules first name them (a
// service's chain, then its endpoints' chains, service after service), so the first
// mention of a chain is mostly the next declared one, and a later one a chain declared
// just before.
func (tx *txn) lookup(t *Table, name string) *Chain {
	if tx.hitT != t {
		tx.hit, tx.jump, tx.hitT = nil, nil, t
		clear(tx.recent[:])
	}
	if name == "" {
		return t.Chain(name)
	}
	i := int(name[len(name)-1])<<3 ^ int(name[(len(name)-1)/2]) ^ len(name)
	set := tx.recent[2*(i%(len(tx.recent)/2)):][:2]
	if c := set[0]; c != nil && c.Name == name {
		return c
	}
	c := set[1]
	if c == nil || c.Name != name {
		c = tx.declared(t, name)
	}
	if c == nil {
		c = t.Chain(name)
	}
	if c != nil {
		set[0], set[1] = c, set[0] // c first, the first before second (a swap when c was second)
	}
	return c
}

// declared returns the chain called name among t's declared chains around declNext, or
// nil (see lookup).
func (tx *txn) declared(t *Table, name string) *Chain {
	if tx.declT != t {
		return nil
	}
	for k := max(tx.declNext-declBehind, 0); k < len(tx.decl) && k < tx.declNext+declWindow; k++ {
		if c := tx.decl[k]; c.Name == name {
			tx.declNext = max(tx.declNext, k+1)
			return c
		}
	}
	return nil
}

// forget drops the chains ruleChain and jumpChain keep (a chain was replaced, removed
// or renamed): with hitT nil, the next lookup clears recent.
func (tx *txn) forget() { tx.hit, tx.jump, tx.hitT = nil, nil, nil }

// cutSpace returns the first field of s (a run of bytes other than ASCII and Unicode
// white space, as strings.Fields splits) and what follows it; field is "" when s
// holds only white space.
func cutSpace(s string) (field, rest string) {
	// ASCII first (the lines a restore reads); the first byte of a multi-byte
	// character hands the rest to the Unicode-aware split.
	i := 0
	for i < len(s) && asciiSpace(s[i]) {
		i++
	}
	j := i
	for j < len(s) && s[j] < utf8.RuneSelf && !asciiSpace(s[j]) {
		j++
	}
	if j == len(s) {
		return s[i:], ""
	}
	if s[j] < utf8.RuneSelf {
		return s[i:j], s[j:] // an ASCII space ends a field of ASCII bytes (j > i)
	}
	return cutSpaceUnicode(s)
}

// asciiSpace reports whether c is one of the ASCII white space bytes unicode.IsSpace
// accepts.
func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// cutSpaceUnicode is cutSpace for a string with multi-byte characters.
func cutSpaceUnicode(s string) (field, rest string) {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	i := strings.IndexFunc(s, unicode.IsSpace)
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// txnSeq numbers transactions.
var txnSeq atomic.Uint64

func newTxn(rs *Ruleset, opts RestoreOptions) *txn {
	return &txn{
		id:     txnSeq.Add(1),
		opts:   opts,
		family: rs.Family,
		orig:   rs,
		rs:     &Ruleset{Family: rs.Family, Tables: slices.Clone(rs.Tables)},
		tables: make(map[string]*tableState),
		sp:     specParser{family: rs.Family},
	}
}

func (tx *txn) errf(opt string, format string, args ...any) error {
	return &ParseError{File: tx.opts.File, Line: tx.line, Option: opt, Err: fmt.Errorf(format, args...)}
}

func (tx *txn) wrap(err error) error {
	var oe *optError
	if errors.As(err, &oe) {
		return &ParseError{File: tx.opts.File, Line: tx.line, Option: oe.opt, Err: oe.err}
	}
	return &ParseError{File: tx.opts.File, Line: tx.line, Err: err}
}

func (tx *txn) run(text string) error {
	defer tx.dropHints()
	tx.text = text
	tx.startPreParse(text)
	defer tx.finishPreParse()
	lineNo := 0
	for len(text) > 0 {
		var line string
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			line, text = text, ""
		}
		tx.rest = text
		lineNo++
		tx.line = lineNo
		line = trimLine(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if tx.skipTable == nil && tx.memoLine(line) {
			text, lineNo = tx.rest, tx.line // memoLine may have taken the lines after this one
			continue
		}
		if tx.inPlace {
			line = strings.Clone(line)
		}
		if tx.skipTable != nil {
			tx.skip(line, fmt.Sprintf("in table %q, whose header was skipped", *tx.skipTable), *tx.skipTable)
			if line == "COMMIT" {
				tx.skipTable = nil
			}
			continue
		}
		var err error
		switch {
		case line[0] == '*':
			err = tx.tableLine(line[1:])
			if err != nil && tx.opts.Lenient && tx.cur == nil {
				name := line[1:]
				tx.skipTable = &name
			}
		case line[0] == ':':
			err = tx.chainLine(line[1:])
		case line == "COMMIT":
			if tx.cur == nil {
				err = tx.errf("", "COMMIT outside a table")
			}
			tx.cur = nil
		default:
			if spec, chain := tx.preParsed(lineNo); spec != nil {
				err = tx.preRuleCommand(spec, chain)
			} else if chain, spec, ok := tx.fastRule(line); ok {
				err = tx.preRuleCommand(spec, chain)
			} else {
				err = tx.commandLine(line)
			}
		}
		if err != nil {
			if !tx.opts.Lenient {
				return err
			}
			table := ""
			if tx.cur != nil {
				table = tx.cur.t.Name
			}
			tx.skip(line, reasonOf(err), table)
		}
	}
	if tx.cur != nil {
		tx.line = lineNo + 1
		err := &ParseError{File: tx.opts.File, Line: lineNo + 1, Err: fmt.Errorf("%w (table %s is not committed)", ErrNoCommit, tx.cur.t.Name)}
		if !tx.opts.Lenient {
			return err
		}
		tx.skipped = append(tx.skipped, SkippedLine{File: tx.opts.File, Line: lineNo + 1, Reason: reasonOf(err) + ": taken as committed", Table: tx.cur.t.Name})
		tx.cur = nil
	}
	for _, t := range tx.rs.Tables {
		ts, ok := tx.tables[t.Name]
		if !ok {
			continue
		}
		// A restore that made most of a large table (a first sync into the few
		// chains that exist) validates it whole: cheaper than following changes.
		if ts.incremental() && (t.NumChains() < 1024 || 4*len(ts.owned) <= t.NumChains()) && tx.validateChanges(ts) {
			t.refs = nil
			if ts.base.refs != nil || ts.delta != nil {
				ts.startDelta()
				t.refs = ts.baseRefs.derive(ts.delta)
			}
			t.checked = true
			continue
		}
		for tries := 0; ; tries++ {
			err := tx.validate(t)
			if err == nil {
				break
			}
			if !tx.opts.Lenient || tries > 10000 || !tx.dropRule(t, err) {
				return err
			}
		}
		t.refs = nil
		t.checked = true
	}
	for _, ts := range tx.tables {
		if ts.t.lineage == nil {
			ts.t.lineage = &lineage{}
		}
		ts.t.lineage.head = ts.t
	}
	tx.commit()
	return nil
}

// dropHints clears the hints of the jumps the transaction parsed (JumpTarget.to):
// their rules may outlive it, shared by later versions, and must not keep the chains
// of this one alive.
func (tx *txn) dropHints() {
	for _, chunk := range tx.sp.jumpChunks {
		for i := range chunk {
			chunk[i].to = nil
		}
	}
	tx.sp.jumpChunks = nil
}

// commit marks the chains of the input ruleset that the result replaced or deleted as
// gone (evaluations then resolve cached jumps to them again) and lists them in tx.gone.
func (tx *txn) commit() {
	for _, ts := range tx.tables {
		if ts.prev == nil {
			continue
		}
		t := ts.t
		if ts.prev == ts.base && ts.incremental() && len(ts.owned)+len(ts.deleted) < ts.prev.NumChains() {
			for _, name := range ts.touched() {
				if c := ts.prev.Chain(name); c != nil && !t.holds(c) {
					tx.gone = append(tx.gone, c)
				}
			}
			continue
		}
		for _, c := range ts.prev.AllChains() {
			if !t.holds(c) {
				tx.gone = append(tx.gone, c)
			}
		}
	}
	for _, ts := range tx.tables {
		for _, c := range ts.owned {
			if c.clean && len(c.Rules) >= memoMinRules && ts.t.holds(c) {
				if b := c.build; b != nil && !b.diverged && b.same == b.memo.src.lines() && len(c.Rules) == len(b.memo.Rules) {
					// Built from the same lines as the version before, over its
					// Specs: what they hold is what that version's scan found
					// (kube-proxy's KUBE-SERVICES, rewritten on every sync), and
					// gcChanges need not read them again. (Every other chain the
					// transaction owns is a new object, unscanned: mut, mutEmpty.)
					c.src, c.scan = b.memo.src, b.memo.scan
				} else {
					c.src = tx.sourceOf(c)
				}
				ts.t.memo = ts.t.memo || c.src != nil
			}
			c.build, c.clean = nil, false
		}
	}
	for _, c := range tx.gone {
		c.gone = true
		if c.prog != nil {
			c.prog.gone = true
		}
	}
}

// validateChanges validates what an incremental restore changed in ts.t, which
// derives from the latest validated version of its table (ts.base): the jumps of the
// chains it changed lead to chains that exist, the jumps that are new (not in base's
// version of the chain at the same position) close no loop (a loop would need one),
// the hooks of a new jump's chain are pushed along it to the chains it reaches, and
// the rules of the changed chains (against the hooks they had, Chain.hooks, plus the
// pushed ones) and of the unchanged chains new hooks reach (against those) are valid.
// It reports false when it cannot decide (Chain.hooks is a superset of the hooks that
// reach a chain, so a rule it finds invalid may not be): the table is then validated
// whole, which sets every chain's hooks to those that reach it.
func (tx *txn) validateChanges(ts *tableState) bool {
	t, base := ts.t, ts.base
	var owned []*Chain
	for _, c := range ts.owned {
		if t.holds(c) {
			owned = append(owned, c)
		}
	}
	// add holds the hooks new jumps bring to a chain (and on to the chains it
	// reaches): an unchanged chain's rules are valid for the hooks that reached it
	// before, and are checked against these.
	add := make(map[*Chain]uint8, len(owned))
	var queue, roots []*Chain
	push := func(to *Chain, bits uint8) {
		if nb := bits &^ add[to]; nb != 0 {
			add[to] |= nb
			queue = append(queue, to)
		}
	}
	for _, u := range owned {
		if u.Builtin {
			h, _ := netfilter.ParseHook(u.Name)
			u.hooks |= 1 << h
		}
		if p := base.Chain(u.Name); p != nil {
			u.hooks |= p.hooks
		}
	}
	for _, u := range owned {
		var old []*Rule
		if p := base.Chain(u.Name); p != nil {
			old = p.Rules
		}
		for i, r := range u.Rules {
			if i < len(old) && old[i].Spec == r.Spec {
				continue // base's rule at this position, reused (memoRules): its jump if any
			}
			j, ok := r.Target.(*JumpTarget)
			if !ok || (i < len(old) && jumpName(old[i]) == j.Chain) {
				continue // not a jump, or one base's version has at this position
			}
			v := t.Chain(j.Chain)
			if v == nil || v.Builtin {
				return false
			}
			roots = append(roots, v)
			push(v, u.hooks)
		}
	}
	for len(queue) > 0 {
		x := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		bits := add[x]
		for _, r := range x.Rules {
			if j, ok := r.Target.(*JumpTarget); ok {
				v := t.Chain(j.Chain)
				if v == nil {
					return false
				}
				push(v, bits)
			}
		}
	}
	if hasLoop(t, roots) {
		return false
	}
	valid := func(c *Chain, m uint8) bool {
		if m == 0 {
			return true
		}
		for _, r := range c.Rules {
			if checkAddrTypeHooks(t, c, r, m) != nil || checkTargetHooks(t, c, r, m) != nil {
				return false
			}
		}
		return true
	}
	for _, u := range owned {
		m := u.hooks | add[u]
		if p := base.Chain(u.Name); p != nil && m&^p.hooks == 0 {
			// A rule over the Spec base's version of the chain has at the same
			// position (a long chain rewritten with the same lines: memoRules) was
			// valid for base's hooks, which cover m: only the others are checked.
			for i, r := range u.Rules {
				if i < len(p.Rules) && p.Rules[i].Spec == r.Spec {
					continue
				}
				if checkAddrTypeHooks(t, u, r, m) != nil || checkTargetHooks(t, u, r, m) != nil {
					return false
				}
			}
			continue
		}
		if !valid(u, m) {
			return false
		}
	}
	for c, m := range add {
		if c.txn != tx.id && !valid(c, m) {
			return false
		}
	}
	for c, m := range add {
		c.hooks |= m
	}
	return true
}

// hasLoop reports whether a chain loop is reachable from roots.
func hasLoop(t *Table, roots []*Chain) bool {
	const (
		grey = iota + 1
		black
	)
	color := make(map[*Chain]uint8)
	type frame struct {
		c *Chain
		i int
	}
	var stack []frame
	for _, root := range roots {
		if color[root] != 0 {
			continue
		}
		color[root] = grey
		stack = append(stack[:0], frame{root, 0})
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			if f.i >= len(f.c.Rules) {
				color[f.c] = black
				stack = stack[:len(stack)-1]
				continue
			}
			r := f.c.Rules[f.i]
			f.i++
			j, ok := r.Target.(*JumpTarget)
			if !ok {
				continue
			}
			d := t.Chain(j.Chain)
			if d == nil {
				return true // not decided here: the whole validation reports it
			}
			switch color[d] {
			case grey:
				return true
			case 0:
				color[d] = grey
				stack = append(stack, frame{d, 0})
			}
		}
	}
	return false
}

// reasonOf is a load error without its FILE:LINE (a SkippedLine has them).
func reasonOf(err error) string {
	var pe *ParseError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	if pe.Option != "" {
		return pe.Option + ": " + pe.Err.Error()
	}
	return pe.Err.Error()
}

// skip records a line a lenient load leaves out.
func (tx *txn) skip(line, reason, table string) {
	sl := SkippedLine{File: tx.opts.File, Line: tx.line, Text: line, Reason: reason, Table: table}
	if f := strings.Fields(line); len(f) >= 2 {
		switch f[0] {
		case "-A", "--append", "-I", "--insert", "-R", "--replace", "-D", "--delete", "-N", "--new-chain", "-F", "--flush", "-P", "--policy":
			sl.Chain = f[1]
		}
	} else if len(f) == 1 && strings.HasPrefix(f[0], ":") {
		sl.Chain = f[0][1:]
	}
	if strings.HasPrefix(line, ":") {
		sl.Chain, _, _ = strings.Cut(line[1:], " ")
	}
	tx.skipped = append(tx.skipped, sl)
}

// dropRule removes the rule a validation error is about (a jump to a missing chain, a
// loop) from t, for a lenient load, and records it. It reports whether it found it.
func (tx *txn) dropRule(t *Table, err error) bool {
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line == 0 {
		return false
	}
	for ci, c := range t.AllChains() {
		for ri, r := range c.Rules {
			if r.File != pe.File || r.Line != pe.Line {
				continue
			}
			nc := &Chain{Name: c.Name, Builtin: c.Builtin, Policy: c.Policy, Counters: c.Counters,
				Rules: append(slices.Clone(c.Rules[:ri]), c.Rules[ri+1:]...), hooks: c.hooks, txn: c.txn}
			t.setChainAt(ci, nc)
			tx.forget()
			tx.undeclare()
			if j, ok := r.Target.(*JumpTarget); ok && tx.tables[t.Name] != nil {
				tx.tables[t.Name].addRef(j.Chain, -1)
			}
			tx.skipped = append(tx.skipped, SkippedLine{File: pe.File, Line: pe.Line, Text: r.Text(c.Name), Reason: reasonOf(pe), Table: t.Name, Chain: c.Name})
			return true
		}
	}
	return false
}

func (tx *txn) tableLine(name string) error {
	if tx.cur != nil {
		return tx.errf("", "%w before *%s (table %s is not committed)", ErrNoCommit, name, tx.cur.t.Name)
	}
	if _, ok := tableDefs[name]; !ok {
		return tx.errf("", "unknown table %q (want raw, mangle, nat, filter or security)", name)
	}
	ts, seen := tx.tables[name]
	if !seen || !tx.opts.NoFlush {
		var t *Table
		old := tx.rs.Table(name)
		ts = &tableState{prev: tx.orig.Table(name)}
		if tx.opts.NoFlush && old != nil {
			t = old.cow()
			if old.checked && old.lineage != nil && old.lineage.head == old && !tx.opts.Lenient && !tx.opts.wholeTables {
				ts.base = old
			}
		} else {
			t, _ = NewTable(name)
			for _, c := range t.AllChains() {
				tx.own(c)
			}
		}
		// Size the chain index for the chains the input declares (a first load, a
		// full resync: see reserve).
		t.reserve(tx.declaredChains())
		ts.t = t
		if i := slices.IndexFunc(tx.rs.Tables, func(x *Table) bool { return x.Name == name }); i >= 0 {
			tx.rs.Tables[i] = t
		} else if tx.opts.keepOrder {
			tx.rs.Tables = append(tx.rs.Tables, t)
		} else {
			i := slices.IndexFunc(tx.rs.Tables, func(x *Table) bool { return nftTableRank[x.Name] > nftTableRank[name] })
			if i < 0 {
				i = len(tx.rs.Tables)
			}
			tx.rs.Tables = slices.Insert(tx.rs.Tables, i, t)
		}
		tx.tables[name] = ts
	}
	tx.cur = ts
	return nil
}

// declaredChains counts the chain lines that follow a table header (before its first
// other line): the size the table's chain index will need, known before it grows.
func (tx *txn) declaredChains() int {
	n, text := 0, tx.rest
	for len(text) > 0 {
		var line string
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			line, text = text, ""
		}
		line = strings.TrimLeft(line, " \t")
		switch {
		case line == "" || line[0] == '#':
		case line[0] == ':':
			n++
		default:
			return n
		}
	}
	return n
}

func parseCounters(s string) (Counters, bool) {
	if len(s) < 5 || s[0] != '[' || s[len(s)-1] != ']' {
		return Counters{}, false
	}
	ps, bs, ok := strings.Cut(s[1:len(s)-1], ":")
	if !ok {
		return Counters{}, false
	}
	p, err1 := strconv.ParseUint(ps, 10, 64)
	b, err2 := strconv.ParseUint(bs, 10, 64)
	return Counters{p, b}, err1 == nil && err2 == nil
}

func (tx *txn) chainLine(rest string) error {
	if tx.cur == nil {
		return tx.errf("", "chain line outside a table (missing *table line)")
	}
	var f [3]string // the fields of rest, as strings.Fields splits them (without a slice per line)
	n := 0
	for rest != "" {
		field, more := cutSpace(rest)
		if field == "" {
			break
		}
		if n == len(f) {
			n++ // too many
			break
		}
		f[n], n, rest = field, n+1, more
	}
	if n < 2 || n > 3 {
		return tx.errf("", "bad chain line: want \":CHAIN POLICY [packets:bytes]\"")
	}
	name, policy := f[0], f[1]
	var ctr Counters
	if n == 3 {
		var ok bool
		if ctr, ok = parseCounters(f[2]); !ok {
			return tx.errf("", "bad counters %q in chain line", f[2])
		}
	}
	t := tx.cur.t
	c := t.Chain(name)
	if c != nil && c.Builtin {
		if policy != "-" {
			if policy != "ACCEPT" && policy != "DROP" {
				return tx.errf("", "bad policy %q for built-in chain %s (want ACCEPT, DROP or -)", policy, name)
			}
			if c.Policy != policy {
				c = tx.mut(c)
				c.Policy = policy
			}
		}
		if tx.opts.Counters && c.Counters != ctr {
			c = tx.mut(c)
			c.Counters = ctr
		}
		return nil
	}
	if _, isHook := netfilter.ParseHook(name); isHook {
		return tx.errf("", "table %s has no built-in chain %s", t.Name, name)
	}
	if policy != "-" {
		return tx.errf("", "user-defined chain %s cannot have policy %q (want -)", name, policy)
	}
	if err := validChainName(name); err != nil {
		return tx.wrap(err)
	}
	if c != nil {
		tx.declare(t, tx.flush(c))
		return nil
	}
	nc := t.AddChain(name)
	nc.clean = true
	tx.own(nc)
	tx.declare(t, nc)
	return nil
}

// declWindow is how many declared chains from declNext lookup compares, and
// declBehind how many before it.
const (
	declWindow = 4
	declBehind = 16
)

// declare notes that a chain line of t declared c, for lookup. Only a chain the
// transaction owns is noted: another (an empty chain of the table before, which flush
// leaves as it is) is replaced by a copy when the transaction changes it, and only
// the copy may be handed out then.
func (tx *txn) declare(t *Table, c *Chain) {
	if c.txn != tx.id {
		return
	}
	if tx.declT != t {
		tx.decl, tx.declT, tx.declNext = tx.decl[:0], t, 0
	}
	tx.decl = append(tx.decl, c)
}

// undeclare forgets the declared chains: a name of the table no longer stands for the
// chain it was declared with (a chain deleted, renamed or replaced).
func (tx *txn) undeclare() { tx.decl, tx.declT, tx.declNext = tx.decl[:0], nil, 0 }

// flush empties a chain; it returns the transaction's copy.
func (tx *txn) flush(c *Chain) *Chain {
	if len(c.Rules) == 0 {
		// Empty already. What the transaction appends to it next builds it from
		// empty (clean), which lets the next version reuse its lines (memoRules):
		// kube-proxy's first sync fills KUBE-SERVICES, which its setup made empty.
		if c.txn == tx.id {
			c.clean = true
			if c.build != nil {
				c.build = &chainBuild{memo: c.build.memo}
			}
		} else {
			if tx.emptyFlushed == nil {
				tx.emptyFlushed = make(map[*Chain]bool)
			}
			tx.emptyFlushed[c] = true // mut's copy will be clean
		}
		return c
	}
	if ts := tx.cur; ts.refs != nil || ts.delta != nil {
		// Until the counts exist (a chain deleted or renamed), there is nothing to
		// update: they are counted from the table as it then stands. Reading every
		// rule and its target here costs a cache miss or two a rule (kube-proxy
		// flushes its 10,000-rule KUBE-SERVICES on every sync).
		for _, r := range c.Rules {
			if j, ok := r.Target.(*JumpTarget); ok {
				ts.addRef(j.Chain, -1)
			}
		}
	}
	memo := c
	if c.build != nil {
		memo = c.build.memo
	}
	c = tx.mutEmpty(c)
	c.Rules = nil
	c.idx, c.jumps, c.prog = nil, nil, nil
	c.build, c.clean = nil, true
	if memo.src != nil {
		c.build = &chainBuild{memo: memo}
	}
	return c
}

// own marks c as the transaction's (its Rules slice private to it).
func (tx *txn) own(c *Chain) {
	c.txn = tx.id
	if tx.cur != nil {
		tx.cur.owned = append(tx.cur.owned, c)
	}
}

// mut returns the transaction's own copy of c, which replaces c in the current table
// (c itself when the transaction made it): table versions share the chains neither
// changed.
func (tx *txn) mut(c *Chain) *Chain {
	if c.txn == tx.id {
		return c
	}
	nc := &Chain{Name: c.Name, Builtin: c.Builtin, Policy: c.Policy, Counters: c.Counters,
		Rules: slices.Clone(c.Rules), idx: c.idx, hooks: c.hooks}
	nc.clean = len(c.Rules) == 0 && tx.emptyFlushed[c]
	tx.cur.t.replaceChain(c, nc)
	tx.forget()
	tx.own(nc)
	return nc
}

// mutEmpty is mut for a chain about to be flushed (its rules are not copied).
func (tx *txn) mutEmpty(c *Chain) *Chain {
	if c.txn == tx.id {
		return c
	}
	nc := &Chain{Name: c.Name, Builtin: c.Builtin, Policy: c.Policy, Counters: c.Counters, hooks: c.hooks}
	tx.cur.t.replaceChain(c, nc)
	tx.forget()
	tx.own(nc)
	return nc
}

// rules returns the transaction's copy of c (see mut), whose rules it may change; the
// caches that depend on them are dropped.
func (tx *txn) rules(c *Chain) *Chain {
	c = tx.mut(c)
	c.idx, c.jumps, c.prog = nil, nil, nil
	return c
}

func (tx *txn) chain(name, opt string) (*Chain, error) {
	c := tx.ruleChain(name)
	if c == nil {
		return nil, &ParseError{File: tx.opts.File, Line: tx.line, Option: opt,
			Err: fmt.Errorf("%w: %s in table %s", ErrChainNotFound, name, tx.cur.t.Name)}
	}
	return c, nil
}

// commandLine applies one command line of the current table ("-A CHAIN spec",
// "-N CHAIN", ...), which may start with "[packets:bytes]" counters.
func (tx *txn) commandLine(line string) error {
	if tx.cur == nil {
		return tx.errf("", "rule outside a table (missing *table line)")
	}
	toks, err := tokenize(line, tx.toks)
	tx.toks = toks
	if err != nil {
		return tx.wrap(err)
	}
	var ctr *Counters
	if len(toks) > 0 && strings.HasPrefix(toks[0].val, "[") && !toks[0].quoted {
		c, ok := parseCounters(toks[0].val)
		if !ok {
			return tx.errf("", "bad counters %q", toks[0].val)
		}
		ctr = &c
		toks = toks[1:]
	}
	if err := tx.checkCommand(toks); err != nil {
		return err
	}
	cmd, args := toks[0].val, toks[1:]
	switch cmd {
	case "-A", "--append", "-I", "--insert", "-R", "--replace", "-D", "--delete":
		return tx.ruleCommand(cmd, args, ctr, line)
	case "-N", "--new-chain", "--new":
		return tx.newChainCommand(cmd, args)
	case "-X", "--delete-chain":
		return tx.deleteChainCommand(cmd, args)
	case "-F", "--flush":
		return tx.flushCommand(cmd, args)
	case "-Z", "--zero":
		return tx.zeroCommand(cmd, args)
	case "-P", "--policy":
		return tx.policyCommand(cmd, args)
	case "-E", "--rename-chain":
		if err := tx.needArgs(cmd, args, 2); err != nil {
			return err
		}
		return tx.rename(args[0].val, args[1].val, cmd)
	}
	return tx.errf(cmd, "unknown or unsupported command (want -A, -I, -R, -D, -N, -X, -F, -Z, -P or -E)")
}

// checkCommand checks a command line's tokens (after its counters): there is a
// command, and no table is named.
func (tx *txn) checkCommand(toks []token) error {
	if len(toks) == 0 {
		return tx.errf("", "empty command")
	}
	for _, t := range toks {
		if !t.quoted && (t.val == "-t" || t.val == "--table") {
			return tx.errf(t.val, "a table cannot be named in a restore line (use *table)")
		}
	}
	return nil
}

// needArgs checks that cmd has at least n arguments.
func (tx *txn) needArgs(cmd string, args []token, n int) error {
	if len(args) < n {
		return tx.errf(cmd, "missing argument")
	}
	return nil
}

// ruleCommand applies -A, -I, -R or -D: CHAIN, a rule number (-I, -R, -D) and a rule
// spec (not with -D NUMBER). ctr holds the line's counters, if any.
func (tx *txn) ruleCommand(cmd string, args []token, ctr *Counters, line string) error {
	if err := tx.needArgs(cmd, args, 1); err != nil {
		return err
	}
	c, err := tx.chain(args[0].val, cmd)
	if err != nil {
		return err
	}
	pos, args, err := tx.ruleNumber(cmd, args[1:])
	if err != nil {
		return err
	}
	del := cmd == "-D" || cmd == "--delete"
	if del && pos >= 0 {
		if len(args) > 0 {
			return tx.errf(cmd, "a rule number and a rule spec together")
		}
		return tx.deleteAt(c, pos, cmd)
	}
	spec, err := tx.sp.parse(args)
	if err != nil {
		return tx.wrap(err)
	}
	return tx.applySpec(c, spec, cmd, pos, ctr)
}

// preParsed returns a pre-parser's result for line lineNo (an -A command's spec and
// chain), or nil.
func (tx *txn) preParsed(lineNo int) (*ruleSpec, string) {
	if tx.pre == nil || tx.cur == nil {
		return nil, ""
	}
	return tx.pre.lookup(lineNo)
}

// fastRule is the parser's fastRule for a line of the current table.
func (tx *txn) fastRule(line string) (chain string, spec *ruleSpec, ok bool) {
	if tx.cur == nil || noFastRule {
		return "", nil, false
	}
	return tx.sp.fastRule(line)
}

// preRuleCommand applies an -A line a pre-parser parsed: ruleCommand after the parse.
func (tx *txn) preRuleCommand(spec *ruleSpec, chain string) error {
	c, err := tx.chain(chain, "-A")
	if err != nil {
		return err
	}
	return tx.applySpec(c, spec, "-A", -1, nil)
}

// applySpec applies command cmd (-A, -I, -R or -D with a rule spec) of a parsed spec to
// chain c, at rule number pos (-1: none given); ctr holds the line's counters, if any.
func (tx *txn) applySpec(c *Chain, spec *ruleSpec, cmd string, pos int, ctr *Counters) error {
	rules, err := tx.specRules(c, spec, ctr)
	if err != nil || rules == nil {
		return err
	}
	if cmd == "-D" || cmd == "--delete" {
		return tx.deleteRules(c, rules, cmd)
	}
	if err := tx.placeRules(c, rules, pos, cmd); err != nil {
		return err
	}
	for _, r := range rules {
		if j, ok := r.Target.(*JumpTarget); ok {
			tx.cur.addRef(j.Chain, 1)
		}
	}
	if c = tx.ruleChain(c.Name); cmd != "-A" && cmd != "--append" {
		c.build, c.clean = nil, false
	} else if c.build != nil {
		c.build.diverged = true // a line of its own
	}
	return nil
}

// memoLine applies an -A line equal to one the version before of its chain was built
// from, reusing that version's rules (chainSrc): no tokenizing or parsing. It reports
// whether it did; the line is then not kept (it may be the caller's input).
func (tx *txn) memoLine(line string) bool {
	name, ok := strings.CutPrefix(line, "-A ")
	if !ok || tx.cur == nil || tx.opts.noMemo {
		return false
	}
	i := strings.IndexByte(name, ' ')
	if i <= 0 {
		return false
	}
	c := tx.ruleChain(name[:i])
	return c != nil && c.build != nil && c.build.memo != nil && tx.memoRules(c, line)
}

// memoRules appends to c the rules of line when c's previous version (which the
// transaction flushed) was built from the same line: new rules over that version's
// Specs (shared, not copied), with this line as their origin and zero counters,
// checked for c as a parse would be. It reports false when there are none (the line is then parsed).
// When the line is the one expected next, the lines that follow it in the input and
// are equal to the version before's next lines are taken too (memoRun).
func (tx *txn) memoRules(c *Chain, line string) bool {
	b := c.build
	src := b.memo.src
	i := b.next
	if i >= src.lines() || src.line(i) != line {
		if b.index == nil {
			b.index = make(map[string]int32, src.lines())
			for j := src.lines() - 1; j >= 0; j-- {
				b.index[src.line(j)] = int32(j)
			}
		}
		j, ok := b.index[line]
		if !ok {
			return false
		}
		i = int(j)
	}
	if cap(c.Rules) < len(b.memo.Rules) {
		// Room for as many rules as the version before had: no regrowing.
		c.Rules = slices.Grow(c.Rules, len(b.memo.Rules)-len(c.Rules))
	}
	if !tx.memoApply(c, i) {
		return false
	}
	if !b.diverged {
		tx.memoRun(c)
	}
	return true
}

// memoApply appends to c the rules of memo's line i for the input's current line
// (tx.line); false when one of them jumps to a chain the transaction deleted (the line
// is then parsed, for the error).
func (tx *txn) memoApply(c *Chain, i int) bool {
	b := c.build
	src := b.memo.src
	old := b.memo.Rules[src.first[i]:src.end[i]]
	// A jump's target existed when the line was parsed for the version before, and
	// still does unless the transaction deleted a chain of that name (rule checks
	// otherwise depend on the table and chain only, which are the same).
	deleted := tx.cur.deleted
	n := len(c.Rules)
	for _, r := range old {
		if len(b.slab) == 0 {
			// Room for the rest of memo's rules (a chain is mostly rewritten
			// with the lines of its version before): one allocation per chain.
			b.slab = make([]Rule, max(64, len(b.memo.Rules)-int(src.first[i])))
		}
		nr := &b.slab[0]
		b.slab = b.slab[1:]
		*nr = *r
		nr.File, nr.Line, nr.Counters = tx.opts.File, tx.line, Counters{}
		if len(deleted) > 0 {
			if j, ok := nr.Target.(*JumpTarget); ok && slices.Contains(deleted, j.Chain) && tx.checkRule(c, nr) != nil {
				c.Rules = c.Rules[:n]
				return false // parsed, for the error
			}
		}
		c.Rules = append(c.Rules, nr)
	}
	if ts := tx.cur; ts.refs != nil || ts.delta != nil {
		for _, r := range c.Rules[n:] {
			if j, ok := r.Target.(*JumpTarget); ok {
				ts.addRef(j.Chain, 1)
			}
		}
	}
	if c.idx != nil || c.jumps != nil || c.prog != nil {
		c.idx, c.jumps, c.prog = nil, nil, nil
	}
	if i == b.next && !b.diverged {
		b.same++ // still the version before, line for line
	} else {
		b.diverged = true
	}
	b.next = i + 1
	return true
}

// memoRun takes the input lines after the current one (tx.rest) that are, byte for
// byte with their line ends, memo's lines from b.next on: each is what memoLine would
// take on its own (an -A line of c equal to the line expected next), so they are
// applied here in order without splitting, trimming or comparing them one by one.
// kube-proxy rewrites KUBE-SERVICES whole on every sync, mostly unchanged. It
// advances tx.rest and tx.line past the lines it takes.
func (tx *txn) memoRun(c *Chain) {
	b := c.build
	src := b.memo.src
	k := b.next
	if k >= src.lines() {
		return
	}
	same := commonPrefix(tx.rest, src.text[src.off[k]:])
	// Whole lines (with their '\n') among the bytes in common: lines k..m-1.
	base := src.off[k]
	m, _ := slices.BinarySearch(src.off[k:], base+int32(same)+1)
	m = k + m - 1
	for i := k; i < m; i++ {
		tx.line++
		if !tx.memoApply(c, i) {
			tx.line--
			break // parsed by the caller's loop
		}
		tx.rest = tx.rest[src.off[i+1]-src.off[i]:]
	}
}

// commonPrefix returns the length of the longest common prefix of a and b, comparing
// them in blocks first.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	const block = 4096
	for i+block <= n && a[i:i+block] == b[i:i+block] {
		i += block
	}
	for i+64 <= n && a[i:i+64] == b[i:i+64] {
		i += 64
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// memoizable reports whether rules parsed from a line may be reused for the same line
// in a later version of their chain: they carry no counters and no match with state
// kept per rule object (an nth counter).
func memoizable(rules []*Rule) bool {
	for _, r := range rules {
		if r.Counters != (Counters{}) {
			return false
		}
		for _, m := range r.Matches {
			if s, ok := m.(*StatisticMatch); ok && s.Nth {
				return false
			}
		}
	}
	return true
}

// ruleNumber takes the rule number off the front of the arguments of -I, -R and -D;
// it is -1 when there is none (-R needs one).
func (tx *txn) ruleNumber(cmd string, args []token) (int, []token, error) {
	pos := -1
	if cmd == "-I" || cmd == "--insert" || cmd == "-R" || cmd == "--replace" || cmd == "-D" || cmd == "--delete" {
		if len(args) > 0 && !args[0].quoted {
			if n, err := strconv.Atoi(args[0].val); err == nil {
				pos = n
				args = args[1:]
			}
		}
		if (cmd == "-R" || cmd == "--replace") && pos < 0 {
			return 0, nil, tx.errf(cmd, "needs a rule number")
		}
	}
	return pos, args, nil
}

// specRules returns the rules a parsed rule spec stands for (one per address of
// comma lists), checked for chain c and stamped with the line they come from and, with
// --counters, the line's counters or the spec's -c. They are nil when the spec is for
// the other family (-4 or -6).
func (tx *txn) specRules(c *Chain, spec *ruleSpec, ctr *Counters) ([]*Rule, error) {
	if spec.skip {
		return nil, nil
	}
	if spec.counters != nil {
		ctr = spec.counters
	}
	rules := spec.expand(tx.sp.one[:0])
	for _, r := range rules {
		if err := tx.checkRule(c, r); err != nil {
			return nil, err
		}
		if j, ok := r.Target.(*JumpTarget); ok {
			j.to = tx.jump // the chain checkRule found (jumpChain); j is from tx.sp's slab
		}
		r.File, r.Line = tx.opts.File, tx.line
		if ctr != nil && tx.opts.Counters {
			r.Counters = *ctr
		}
	}
	return rules, nil
}

// placeRules adds rules to c: -A appends them, -I inserts them at pos (1 by default),
// -R replaces rule pos with the one rule.
func (tx *txn) placeRules(c *Chain, rules []*Rule, pos int, cmd string) error {
	switch cmd {
	case "-A", "--append":
		c = tx.rules(c)
		tx.appendRules(c, rules)
	case "-I", "--insert":
		if pos < 0 {
			pos = 1
		}
		if pos < 1 || pos > len(c.Rules)+1 {
			return tx.errf(cmd, "index of insertion %d too big (chain %s has %d rules)", pos, c.Name, len(c.Rules))
		}
		c = tx.rules(c)
		c.build, c.clean = nil, false
		c.Rules = slices.Insert(c.Rules, pos-1, rules...)
	case "-R", "--replace":
		if len(rules) != 1 {
			return tx.errf(cmd, "-R takes a single rule (no address lists)")
		}
		if err := tx.deleteAt(c, pos, cmd); err != nil {
			return err
		}
		c = tx.rules(tx.cur.t.Chain(c.Name))
		c.Rules = slices.Insert(c.Rules, pos-1, rules[0])
	}
	return nil
}

// deleteRules deletes from c, for each of rules, the first rule that saves as it does
// (-D with a rule spec).
func (tx *txn) deleteRules(c *Chain, rules []*Rule, cmd string) error {
	for _, r := range rules {
		text := r.String()
		c = tx.cur.t.Chain(c.Name) // deleteAt may have replaced it with the transaction's copy
		i := slices.IndexFunc(c.Rules, func(x *Rule) bool { return x.String() == text })
		if i < 0 {
			return tx.errf(cmd, "bad rule (does a matching rule exist in chain %s?)", c.Name)
		}
		if err := tx.deleteAt(c, i+1, cmd); err != nil {
			return err
		}
	}
	return nil
}

// newChainCommand applies -N CHAIN.
func (tx *txn) newChainCommand(cmd string, args []token) error {
	if err := tx.needArgs(cmd, args, 1); err != nil {
		return err
	}
	name := args[0].val
	if err := validChainName(name); err != nil {
		return tx.wrap(&optError{cmd, err})
	}
	if tx.cur.t.Chain(name) != nil {
		return tx.errf(cmd, "%w: %s", ErrChainExists, name)
	}
	nc := tx.cur.t.AddChain(name)
	nc.clean = true
	tx.own(nc)
	return nil
}

// deleteChainCommand applies -X [CHAIN]: without a chain, every user chain of the table.
func (tx *txn) deleteChainCommand(cmd string, args []token) error {
	if len(args) == 0 {
		for _, c := range tx.cur.t.Chains() {
			if !c.Builtin {
				if err := tx.deleteChain(c, cmd); err != nil {
					return err
				}
			}
		}
		return nil
	}
	c, err := tx.chain(args[0].val, cmd)
	if err != nil {
		return err
	}
	return tx.deleteChain(c, cmd)
}

// flushCommand applies -F [CHAIN]: without a chain, every chain of the table.
func (tx *txn) flushCommand(cmd string, args []token) error {
	if len(args) == 0 {
		for _, c := range tx.cur.t.Chains() {
			tx.flush(c)
		}
		return nil
	}
	c, err := tx.chain(args[0].val, cmd)
	if err != nil {
		return err
	}
	tx.flush(c)
	return nil
}

// zeroCommand applies -Z [CHAIN]: the counters of the chain (or of every chain of the
// table) and of its rules are zeroed.
func (tx *txn) zeroCommand(cmd string, args []token) error {
	chains := tx.cur.t.Chains()
	if len(args) > 0 {
		c, err := tx.chain(args[0].val, cmd)
		if err != nil {
			return err
		}
		chains = []*Chain{c}
	}
	for _, c := range chains {
		c = tx.rules(c)
		c.build, c.clean = nil, false
		c.Counters = Counters{}
		for i, r := range c.Rules {
			nr := *r
			nr.Counters = Counters{}
			c.Rules[i] = &nr
		}
	}
	return nil
}

// policyCommand applies -P CHAIN ACCEPT|DROP to a built-in chain.
func (tx *txn) policyCommand(cmd string, args []token) error {
	if err := tx.needArgs(cmd, args, 2); err != nil {
		return err
	}
	c, err := tx.chain(args[0].val, cmd)
	if err != nil {
		return err
	}
	if !c.Builtin {
		return tx.errf(cmd, "cannot set the policy of user-defined chain %s", c.Name)
	}
	if p := args[1].val; p != "ACCEPT" && p != "DROP" {
		return tx.errf(cmd, "bad policy %q (want ACCEPT or DROP)", p)
	}
	if c.Policy != args[1].val {
		c = tx.mut(c)
		c.Policy = args[1].val
	}
	return nil
}

// checkRule validates a rule for a chain of the current table.
func (tx *txn) checkRule(c *Chain, r *Rule) error {
	t := tx.cur.t
	switch tg := r.Target.(type) {
	case *JumpTarget:
		opt := "-j"
		if tg.Goto {
			opt = "-g"
		}
		dst := tx.jumpChain(tg.Chain)
		if dst == nil {
			return &ParseError{File: tx.opts.File, Line: tx.line, Option: opt + " " + tg.Chain,
				Err: fmt.Errorf("jump to missing chain: %w: %s in table %s", ErrChainNotFound, tg.Chain, t.Name)}
		}
		if dst.Builtin {
			return tx.errf(opt+" "+tg.Chain, "cannot jump to built-in chain %s", tg.Chain)
		}
	case *VerdictTarget:
		if tg.Verdict == "RETURN" && c.Builtin {
			// Allowed: RETURN in a built-in chain applies the policy.
			return nil
		}
	default:
		if r.Target == nil {
			return nil
		}
		if def := targets[r.Target.Name()]; def != nil && def.table != "" && def.table != t.Name {
			return tx.errf("-j "+r.Target.Name(), "only valid in the %s table, not %s", def.table, t.Name)
		}
	}
	return nil
}

func (tx *txn) deleteAt(c *Chain, pos int, cmd string) error {
	if pos < 1 || pos > len(c.Rules) {
		return tx.errf(cmd, "index of deletion %d too big (chain %s has %d rules)", pos, c.Name, len(c.Rules))
	}
	c = tx.rules(c)
	c.build, c.clean = nil, false
	if j, ok := c.Rules[pos-1].Target.(*JumpTarget); ok {
		tx.cur.addRef(j.Chain, -1)
	}
	c.Rules = slices.Delete(c.Rules, pos-1, pos)
	return nil
}

func (tx *txn) deleteChain(c *Chain, cmd string) error {
	if c.Builtin {
		return tx.errf(cmd, "cannot delete built-in chain %s", c.Name)
	}
	if len(c.Rules) > 0 || tx.cur.refCount(c.Name) > 0 {
		return tx.errf(cmd, "%w: %s", ErrChainBusy, c.Name)
	}
	tx.cur.t.removeChain(c.Name)
	tx.forget()
	tx.undeclare()
	tx.cur.deleted = append(tx.cur.deleted, c.Name)
	if tx.cur.refs != nil {
		delete(tx.cur.refs, c.Name)
	}
	return nil
}

func (tx *txn) rename(from, to, cmd string) error {
	t := tx.cur.t
	c, err := tx.chain(from, cmd)
	if err != nil {
		return err
	}
	if c.Builtin {
		return tx.errf(cmd, "cannot rename built-in chain %s", from)
	}
	if err := validChainName(to); err != nil {
		return tx.wrap(&optError{cmd, err})
	}
	if t.Chain(to) != nil {
		return tx.errf(cmd, "%w: %s", ErrChainExists, to)
	}
	// A rename is validated with the whole table (rare: kube-proxy does not rename).
	tx.cur.full, tx.cur.delta = true, nil
	tx.cur.countRefs()
	c = tx.mut(c)
	c.build, c.clean = nil, false
	t.setIndex(from, nil)
	tx.forget()
	tx.undeclare()
	c.Name = to
	t.setIndex(to, c)
	tx.cur.deleted = append(tx.cur.deleted, from)
	tx.cur.refs[to] = tx.cur.refs[from]
	delete(tx.cur.refs, from)
	for _, ch := range t.Chains() {
		for i, r := range ch.Rules {
			if j, ok := r.Target.(*JumpTarget); ok && j.Chain == from {
				ch = tx.rules(ch)
				ch.build, ch.clean = nil, false
				nr := r.withSpec()
				nr.Target = &JumpTarget{Chain: to, Goto: j.Goto}
				ch.Rules[i] = nr
			}
		}
	}
	return nil
}

// validate checks a table the transaction changed as the kernel does at commit: no
// chain loops, and NAT/REJECT targets only in chains reachable from the hooks where
// they are valid.
func (tx *txn) validate(t *Table) error {
	g := resolveJumps(t)
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, t.NumChains())
	order := make([]int32, 0, t.NumChains()) // post-order
	type frame struct{ c, i int32 }
	var stack []frame
	for s := range t.NumChains() {
		if color[s] != white {
			continue
		}
		stack = append(stack[:0], frame{int32(s), g.start[s]})
		color[s] = grey
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			if f.i >= g.start[f.c+1] {
				color[f.c] = black
				order = append(order, f.c)
				stack = stack[:len(stack)-1]
				continue
			}
			dst := g.dst[f.i]
			f.i++
			// The rule itself is read only for an error: a walk over the positions
			// alone does not touch the table's 300,000 rules again.
			if dst < 0 {
				r := g.rule[f.i-1]
				j := r.Target.(*JumpTarget)
				return &ParseError{File: r.File, Line: r.Line, Option: "-j " + j.Chain,
					Err: fmt.Errorf("jump to missing chain: %w: %s in table %s", ErrChainNotFound, j.Chain, t.Name)}
			}
			switch color[dst] {
			case grey:
				r := g.rule[f.i-1]
				j := r.Target.(*JumpTarget)
				return &ParseError{File: r.File, Line: r.Line, Option: "-j " + j.Chain,
					Err: fmt.Errorf("%w: %s reaches itself (table %s)", ErrLoop, j.Chain, t.Name)}
			case white:
				color[dst] = grey
				stack = append(stack, frame{dst, g.start[dst]})
			}
		}
	}
	// Propagate hook masks from the built-in chains, callers before callees.
	mask := make([]uint8, t.NumChains())
	for i, c := range t.AllChains() {
		if c.Builtin {
			h, _ := netfilter.ParseHook(c.Name)
			mask[i] |= 1 << h
		}
	}
	for i := len(order) - 1; i >= 0; i-- {
		c := order[i]
		m := mask[c]
		for _, d := range g.dst[g.start[c]:g.start[c+1]] {
			mask[d] |= m
		}
	}
	// Only a chain with a rule limited to hooks that do not all reach it is invalid
	// (resolveJumps found the hooks each chain's rules allow): its rules are read
	// again for the first error, as the checks word it.
	for i, c := range t.AllChains() {
		m := mask[i]
		if m&^g.allowed[i] == 0 {
			continue
		}
		for _, r := range c.Rules {
			if err := checkAddrTypeHooks(t, c, r, m); err != nil {
				return err
			}
			if err := checkTargetHooks(t, c, r, m); err != nil {
				return err
			}
		}
	}
	// Valid: each chain's hooks are those that reach it here (what an incremental
	// validation of the next version starts from).
	for i, c := range t.AllChains() {
		c.hooks = mask[i]
	}
	return nil
}

// checkTargetHooks rejects a rule whose target is not valid in a hook of the mask.
func checkTargetHooks(t *Table, c *Chain, r *Rule, m uint8) error {
	if bad := m &^ targetHooks(r); bad != 0 {
		var hooks []string
		for h := netfilter.Prerouting; h <= netfilter.Postrouting; h++ {
			if bad&(1<<h) != 0 {
				hooks = append(hooks, h.String())
			}
		}
		return &ParseError{File: r.File, Line: r.Line, Option: "-j " + r.Target.Name(),
			Err: fmt.Errorf("not valid in chain %s of table %s, which is reached from %s", c.Name, t.Name, strings.Join(hooks, ", "))}
	}
	return nil
}

// jumpGraph is a table's jumps with their targets resolved to chain positions (in
// the table, as ChainAt numbers them): chain i's jump rules, in rule order, are rule[start[i]:start[i+1]] and
// their targets dst[...] (-1 for a chain that does not exist).
type jumpGraph struct {
	start []int32
	dst   []int32
	rule  []*Rule
	// allowed[i] is the mask of hooks from which every rule of chain i is valid
	// (allowedHooks).
	allowed []uint8
}

// allowedHooks is the mask of hooks from which r is valid: all but those its target
// (checkTargetHooks) or an addrtype interface limit (checkAddrTypeHooks) excludes.
func allowedHooks(r *Rule) uint8 {
	allowed := targetHooks(r)
	for _, mt := range r.Matches {
		if a, ok := mt.(*AddrTypeMatch); ok {
			_, bad := addrTypeLimit(a)
			allowed &^= bad
		}
	}
	return allowed
}

// targetHooks is the mask of hooks from which r's target may be reached: all of them
// for no target, a jump (chain names cannot be target names: validChainName) or a
// target valid anywhere.
func targetHooks(r *Rule) uint8 {
	if r.Target == nil {
		return ^uint8(0)
	}
	if _, ok := r.Target.(*JumpTarget); ok {
		return ^uint8(0)
	}
	def := targets[r.Target.Name()]
	if def == nil || def.hooks == nil {
		return ^uint8(0)
	}
	var allowed uint8
	for _, h := range def.hooks {
		allowed |= 1 << h
	}
	return allowed
}

// addrTypeLimit is an addrtype match's interface limit option and the mask of hooks it
// is not valid from, as the kernel's addrtype_mt_checkentry_v1 rejects them (no output
// device yet, or no input device); 0 without a limit.
func addrTypeLimit(a *AddrTypeMatch) (opt string, bad uint8) {
	switch {
	case a.LimitOut:
		return "--limit-iface-out", 1<<netfilter.Prerouting | 1<<netfilter.Input
	case a.LimitIn:
		return "--limit-iface-in", 1<<netfilter.Output | 1<<netfilter.Postrouting
	}
	return "", 0
}

// resolveJumps looks each jump's target up once (by name; the validation then works
// on positions, without maps keyed by chain).
func resolveJumps(t *Table) jumpGraph {
	// Room for every rule to be a jump: counting the jumps first would read every
	// rule twice (cache misses, most of the cost at 300,000 rules).
	n := 0
	for i, c := range t.AllChains() {
		c.pos = int32(i)
		n += len(c.Rules)
	}
	g := jumpGraph{start: make([]int32, t.NumChains()+1), dst: make([]int32, 0, n), rule: make([]*Rule, 0, n),
		allowed: make([]uint8, t.NumChains())}
	for i, c := range t.AllChains() {
		g.start[i] = int32(len(g.dst))
		allowed := ^uint8(0)
		for _, r := range c.Rules {
			j, ok := r.Target.(*JumpTarget)
			if !ok || len(r.Matches) > 0 {
				allowed &= allowedHooks(r)
			}
			if !ok {
				continue
			}
			d := int32(-1)
			if h := j.to; h != nil && int(h.pos) < t.NumChains() && t.ChainAt(int(h.pos)) == h && h.Name == j.Chain {
				d = h.pos // the chain its parse found is still the table's chain of that name
			} else if dc := t.Chain(j.Chain); dc != nil {
				d = dc.pos
			}
			g.dst = append(g.dst, d)
			g.rule = append(g.rule, r)
		}
		g.allowed[i] = allowed
	}
	g.start[t.NumChains()] = int32(len(g.dst))
	return g
}

// checkAddrTypeHooks rejects an addrtype match whose interface limit its chain's hooks
// cannot have, as the kernel's addrtype_mt_checkentry_v1 does: --limit-iface-out not
// from PREROUTING or INPUT (no output device yet), --limit-iface-in not from OUTPUT or
// POSTROUTING (no input device). hooks is the mask of hooks that reach the chain.
func checkAddrTypeHooks(t *Table, c *Chain, r *Rule, hooks uint8) error {
	for _, mt := range r.Matches {
		a, ok := mt.(*AddrTypeMatch)
		if !ok {
			continue
		}
		opt, bad := addrTypeLimit(a)
		for h := netfilter.Prerouting; h <= netfilter.Postrouting; h++ {
			if bad&hooks&(1<<h) != 0 {
				return &ParseError{File: r.File, Line: r.Line, Option: "-m addrtype " + opt,
					Err: fmt.Errorf("not valid in chain %s of table %s, which is reached from %s", c.Name, t.Name, h)}
			}
		}
	}
	return nil
}

// Save renders the named tables (all when none are named) as iptables-save prints
// them: tables in the order the ruleset keeps (a loaded dump's order; tables a restore
// creates go where iptables-nft-save puts them: mangle, security, raw, filter, nat), built-in chains then user chains by name, rules
// grouped by chain. With counters, chain lines carry the policy counters and rules
// start with [packets:bytes], as iptables-save -c prints them.
func (rs *Ruleset) Save(counters bool, tables ...string) []byte {
	n := 0
	for _, t := range rs.Tables {
		for _, c := range t.AllChains() {
			n += 32 + 160*len(c.Rules)
		}
	}
	b := make([]byte, 0, n)
	for _, t := range rs.Tables {
		if len(tables) > 0 && !slices.Contains(tables, t.Name) {
			continue
		}
		b = append(b, '*')
		b = append(b, t.Name...)
		b = append(b, '\n')
		chains := t.saveOrder()
		for _, c := range chains {
			b = append(b, ':')
			b = append(b, c.Name...)
			if c.Builtin {
				b = append(b, ' ')
				b = append(b, c.Policy...)
			} else {
				b = append(b, " -"...)
			}
			if counters && c.Builtin {
				b = fmt.Appendf(b, " [%d:%d]\n", c.Counters.Packets, c.Counters.Bytes)
			} else {
				b = append(b, " [0:0]\n"...)
			}
		}
		for _, c := range chains {
			for _, r := range c.Rules {
				if counters {
					b = append(b, '[')
					b = strconv.AppendUint(b, r.Counters.Packets, 10)
					b = append(b, ':')
					b = strconv.AppendUint(b, r.Counters.Bytes, 10)
					b = append(b, "] "...)
				}
				b = append(b, "-A "...)
				b = append(b, c.Name...)
				b = r.appendSpec(b)
				b = append(b, '\n')
			}
		}
		b = append(b, "COMMIT\n"...)
	}
	return b
}
