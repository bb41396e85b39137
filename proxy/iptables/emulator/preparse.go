package emulator

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
)

// A restore of a large text into tables that hold no rules to reuse (a first sync,
// a dump loaded for a trace) spends most of its time tokenizing and parsing -A lines.
// That work depends on nothing but the line and the family, so other goroutines do
// part of it while the transaction applies the lines in order: the pre-parser.
//
// The text is cut into chunks of whole lines. The transaction claims chunks from the
// front and reads their lines the ordinary way; workers claim chunks from the back
// and parse their "-A CHAIN SPEC" lines. Where the two meet, the transaction waits
// for the worker's chunk in progress (at most one) and from then on applies parsed
// rules: neither side waits for the other while there are chunks left to claim. A line
// a worker could not take as a plain append — counters, a table option, a tokenizing
// or parsing error, a spec for the other family — has no result and goes the ordinary
// way, so every error is the one the ordinary path gives, at the same line. The rules
// a worker parses come from its own parser's slabs; everything the transaction does
// with a parsed rule (the chain lookup, the checks, the placement, the line stamp)
// stays in order.

// Variables, not constants, for tests, which make chunks of a few lines.
var (
	// preParseMinLines is the least number of lines worth pre-parsing: below it the
	// goroutines cost more than they save.
	preParseMinLines = 8192
	// preChunkLines is the number of lines of a chunk.
	preChunkLines = 1024
	// preParseAll makes the transaction wait for the workers' results for every
	// chunk rather than claim any (tests: the front chunks are otherwise the
	// transaction's).
	preParseAll = false
)

// preParsed is a worker's result for one line: chain and rule spec (rule nil: none).
type preParsed struct {
	chain string
	rule  *Rule
	lists *ruleSpec // the spec when it has address lists, else nil
}

// preChunk is lines [first, first+n) of the text, bytes [start, end).
type preChunk struct {
	first, n   int
	start, end int
	done       chan struct{} // closed when a worker has filled res
	res        []preParsed   // indexed by line - first; nil when the transaction claimed the chunk
	taken      bool          // the transaction has claimed the chunk or has its results
}

// preParser runs the workers of one transaction.
type preParser struct {
	text   string
	chunks []preChunk
	// ends packs the claims: chunks below lo (low 32 bits) are the transaction's,
	// chunks from hi (high 32 bits) on are the workers'.
	ends    atomic.Uint64
	stop    atomic.Bool
	wg      sync.WaitGroup
	parsers []*specParser
	cur     int      // the chunk the transaction is in
	used    int      // lines lookup answered
	spec    ruleSpec // lookup's result for a rule without address lists
}

// startPreParse starts pre-parsing text for tx when it is worth it: a large text,
// more than one CPU, and no table of the ruleset rebuilding chains from their lines
// (memoLine would take most lines without parsing them).
func (tx *txn) startPreParse(text string) {
	workers := runtime.GOMAXPROCS(0) - 1
	if workers < 1 || tx.opts.noPreParse || len(text) < preParseMinLines*8 {
		return
	}
	for _, t := range tx.orig.Tables {
		if t.memo {
			return
		}
	}
	// Chunks of about preChunkLines lines, cut at the line end after that many
	// bytes of an average line (a sync's lines are alike), their lines counted.
	sample := text[:min(len(text), 1<<16)]
	avg := max(len(sample)/max(strings.Count(sample, "\n"), 1), 1)
	if len(text)/avg < preParseMinLines {
		return
	}
	size := avg * preChunkLines
	p := &preParser{text: text, chunks: make([]preChunk, 0, len(text)/size+1)}
	for start, first := 0, 1; start < len(text); {
		end := len(text)
		if start+size < len(text) {
			if i := strings.IndexByte(text[start+size:], '\n'); i >= 0 {
				end = start + size + i + 1
			}
		}
		n := strings.Count(text[start:end], "\n")
		if end == len(text) && text[end-1] != '\n' {
			n++ // the last line has no line end
		}
		p.chunks = append(p.chunks, preChunk{first: first, n: n, start: start, end: end, done: make(chan struct{})})
		start, first = end, first+n
	}
	p.ends.Store(uint64(len(p.chunks)) << 32)
	p.parsers = make([]*specParser, workers)
	for w := range workers {
		sp := &specParser{family: tx.family}
		p.parsers[w] = sp
		p.wg.Add(1)
		go p.work(sp)
	}
	tx.pre = p
}

// claim claims the next chunk from the front (front) or from the back for a worker,
// and returns it, or -1 when none is left.
func (p *preParser) claim(front bool) int {
	for {
		e := p.ends.Load()
		lo, hi := uint32(e), uint32(e>>32)
		if lo >= hi {
			return -1
		}
		next, j := e, 0
		if front {
			next, j = e+1, int(lo)
		} else {
			next, j = uint64(hi-1)<<32|uint64(lo), int(hi-1)
		}
		if p.ends.CompareAndSwap(e, next) {
			return j
		}
	}
}

// work claims chunks from the back and parses them until none is left or the
// transaction ends.
func (p *preParser) work(sp *specParser) {
	defer p.wg.Done()
	var toks []token
	for !p.stop.Load() {
		j := p.claim(false)
		if j < 0 {
			return
		}
		ch := &p.chunks[j]
		res := make([]preParsed, ch.n)
		text := p.text[ch.start:ch.end]
		for i := range ch.n {
			var line string
			if k := strings.IndexByte(text, '\n'); k >= 0 {
				line, text = text[:k], text[k+1:]
			} else {
				line, text = text, ""
			}
			if p.stop.Load() {
				break
			}
			toks = sp.preParseLine(&res[i], trimLine(line), toks)
		}
		ch.res = res
		close(ch.done)
	}
}

// preParseLine parses line into out if it is a plain "-A CHAIN SPEC" whose spec
// parses (without -c counters, for this family); out is left empty otherwise.
func (sp *specParser) preParseLine(out *preParsed, line string, toks []token) []token {
	if !strings.HasPrefix(line, "-A ") {
		return toks
	}
	if !noFastRule {
		if chain, spec, ok := sp.fastRule(line); ok {
			out.chain, out.rule = chain, spec.rule
			return toks
		}
	}
	toks, err := tokenize(line, toks)
	if err != nil || len(toks) < 2 || toks[0].quoted || toks[0].val != "-A" {
		return toks
	}
	for _, t := range toks {
		if !t.quoted && (t.val == "-t" || t.val == "--table") {
			return toks
		}
	}
	spec, err := sp.parse(toks[2:])
	if err != nil || spec.skip || spec.counters != nil {
		return toks
	}
	out.chain, out.rule = toks[1].val, spec.rule
	if spec.srcs != nil || spec.dsts != nil {
		s := *spec
		out.lists = &s
	}
	return toks
}

// lookup returns the parsed spec of line lineNo and the chain it names, or nil: the
// line goes the ordinary way. Lines are looked up in increasing order; the spec is
// valid until the next lookup.
func (p *preParser) lookup(lineNo int) (*ruleSpec, string) {
	for p.cur < len(p.chunks) {
		ch := &p.chunks[p.cur]
		if !ch.taken {
			p.take(p.cur)
		}
		if lineNo < ch.first+ch.n {
			break
		}
		ch.res = nil // let the parsed results go
		p.cur++
	}
	if p.cur >= len(p.chunks) {
		return nil, ""
	}
	ch := &p.chunks[p.cur]
	i := lineNo - ch.first
	if i < 0 || i >= len(ch.res) || ch.res[i].rule == nil {
		return nil, ""
	}
	pp := &ch.res[i]
	p.used++
	if pp.lists != nil {
		return pp.lists, pp.chain
	}
	p.spec = ruleSpec{rule: pp.rule}
	return &p.spec, pp.chain
}

// take makes chunk j the transaction's: it claims the chunk if no worker has (its
// lines then go the ordinary way), or waits for the worker's results.
func (p *preParser) take(j int) {
	ch := &p.chunks[j]
	ch.taken = true
	if preParseAll {
		<-ch.done
		return
	}
	if c := p.claim(true); c == j {
		return
	} else if c >= 0 {
		panic("emulator: pre-parser claimed chunks out of order")
	}
	<-ch.done
}

// finishPreParse stops the workers and waits for them; the jumps they parsed join the
// transaction's (dropHints clears their hints).
func (tx *txn) finishPreParse() {
	p := tx.pre
	if p == nil {
		return
	}
	tx.pre, tx.preUsed = nil, p.used
	p.stop.Store(true)
	p.wg.Wait()
	for _, sp := range p.parsers {
		tx.sp.jumpChunks = append(tx.sp.jumpChunks, sp.jumpChunks...)
	}
}
