package emulator

import (
	"iter"
	"slices"
	"sync/atomic"
)

// chainChunkSize is the most chains a chunk of a chainList holds.
const chainChunkSize = 256

// chainList is a table's chains in order, stored in chunks of at most chainChunkSize
// that versions of the table share (copy on write): a version that changes one chain
// copies that chunk and the chunk index (a few hundred pointers at 110,000 chains),
// not the whole list. Chains are only appended at the end, replaced in place and
// deleted, so a chain only moves towards the front.
//
// A chainList whose clone was taken is not changed afterwards (clone gives both
// copies new ids, so neither writes a chunk they share).
type chainList struct {
	chunks []*chainChunk
	// start[k] is the position of chunks[k]'s first chain; start[len(chunks)] is the
	// length of the list (start is nil for an empty list).
	start []int32
	// id marks the chunks this list may write (chainChunk.owner); ownIndex: chunks
	// and start are this list's own slices.
	id       uint64
	ownIndex bool
}

// chainChunk is a run of consecutive chains of a chainList.
type chainChunk struct {
	owner  uint64
	chains []*Chain
}

// chainListSeq numbers chainLists, so that a chunk knows its owner.
var chainListSeq atomic.Uint64

func newChainList() chainList { return chainList{id: chainListSeq.Add(1), ownIndex: true} }

// len returns the number of chains.
func (l *chainList) len() int {
	if len(l.start) == 0 {
		return 0
	}
	return int(l.start[len(l.start)-1])
}

// locate returns the chunk holding position i and i's offset in it (i in range).
func (l *chainList) locate(i int) (int, int) {
	// Chunks are mostly full: start from the chunk i would be in if all were.
	k := min(i/chainChunkSize, len(l.chunks)-1)
	for int(l.start[k]) > i {
		k--
	}
	for int(l.start[k+1]) <= i {
		k++
	}
	return k, i - int(l.start[k])
}

// at returns the chain at position i.
func (l *chainList) at(i int) *Chain {
	if i < 0 || i >= l.len() {
		panic("emulator: chain position out of range")
	}
	k, off := l.locate(i)
	return l.chunks[k].chains[off]
}

// all yields each chain with its position, in order.
func (l *chainList) all() iter.Seq2[int, *Chain] {
	return func(yield func(int, *Chain) bool) {
		i := 0
		for _, ch := range l.chunks {
			for _, c := range ch.chains {
				if !yield(i, c) {
					return
				}
				i++
			}
		}
	}
}

// slice returns the chains in a new slice.
func (l *chainList) slice() []*Chain {
	out := make([]*Chain, 0, l.len())
	for _, ch := range l.chunks {
		out = append(out, ch.chains...)
	}
	return out
}

// clone returns a list with the same chains that shares l's chunks; l and the clone
// each copy a chunk before changing it.
func (l *chainList) clone() chainList {
	l.id, l.ownIndex = chainListSeq.Add(1), false
	return chainList{chunks: l.chunks, start: l.start, id: chainListSeq.Add(1)}
}

// writableIndex makes chunks and start this list's own.
func (l *chainList) writableIndex() {
	if !l.ownIndex {
		l.chunks = slices.Clone(l.chunks)
		l.start = slices.Clone(l.start)
		l.ownIndex = true
	}
}

// writable returns chunk k, made this list's own.
func (l *chainList) writable(k int) *chainChunk {
	l.writableIndex()
	ch := l.chunks[k]
	if ch.owner != l.id {
		cs := make([]*Chain, len(ch.chains), chainChunkSize)
		copy(cs, ch.chains)
		ch = &chainChunk{owner: l.id, chains: cs}
		l.chunks[k] = ch
	}
	return ch
}

// set puts c at position i.
func (l *chainList) set(i int, c *Chain) {
	k, off := l.locate(i)
	l.writable(k).chains[off] = c
}

// append adds c at the end.
func (l *chainList) append(c *Chain) {
	l.writableIndex()
	if n := len(l.chunks); n > 0 && len(l.chunks[n-1].chains) < chainChunkSize {
		ch := l.writable(n - 1)
		ch.chains = append(ch.chains, c)
		l.start[n]++
		return
	}
	cs := make([]*Chain, 1, chainChunkSize)
	cs[0] = c
	l.chunks = append(l.chunks, &chainChunk{owner: l.id, chains: cs})
	if len(l.start) == 0 {
		l.start = append(l.start, 0)
	}
	l.start = append(l.start, l.start[len(l.start)-1]+1)
}

// delete removes the chain at position i. A chunk left empty is dropped; one left
// under a quarter full is merged with a neighbour when the two fit in one chunk, so
// that deletions do not leave a long index of small chunks.
func (l *chainList) delete(i int) {
	k, off := l.locate(i)
	l.writableIndex()
	if len(l.chunks[k].chains) == 1 {
		l.chunks = slices.Delete(l.chunks, k, k+1)
		l.start = slices.Delete(l.start, k+1, k+2)
	} else {
		ch := l.writable(k)
		ch.chains = slices.Delete(ch.chains, off, off+1)
	}
	l.fixStarts(k)
	if len(l.chunks) == 0 {
		l.start = nil
		return
	}
	// Merge a small chunk with a neighbour.
	m := min(k, len(l.chunks)-1)
	if len(l.chunks[m].chains) >= chainChunkSize/4 {
		return
	}
	for _, p := range []int{m, m - 1} { // merge chunks p and p+1
		if p < 0 || p+1 >= len(l.chunks) || len(l.chunks[p].chains)+len(l.chunks[p+1].chains) > chainChunkSize {
			continue
		}
		cs := make([]*Chain, 0, chainChunkSize)
		cs = append(append(cs, l.chunks[p].chains...), l.chunks[p+1].chains...)
		l.chunks[p] = &chainChunk{owner: l.id, chains: cs}
		l.chunks = slices.Delete(l.chunks, p+1, p+2)
		l.start = slices.Delete(l.start, p+1, p+2)
		return
	}
}

// fixStarts recomputes start from chunk k on.
func (l *chainList) fixStarts(k int) {
	for j := k; j < len(l.chunks); j++ {
		l.start[j+1] = l.start[j] + int32(len(l.chunks[j].chains))
	}
}

// indexOf returns c's position, or -1. hint is where c was last seen: a chain only
// moves towards the front, so the search goes backwards from it first.
func (l *chainList) indexOf(c *Chain, hint int) int {
	n := l.len()
	if n == 0 {
		return -1
	}
	hint = max(0, min(hint, n-1))
	k, off := l.locate(hint)
	for kk := k; kk >= 0; kk-- {
		cs := l.chunks[kk].chains
		from := len(cs) - 1
		if kk == k {
			from = off
		}
		for o := from; o >= 0; o-- {
			if cs[o] == c {
				return int(l.start[kk]) + o
			}
		}
	}
	for kk := k; kk < len(l.chunks); kk++ {
		cs := l.chunks[kk].chains
		from := 0
		if kk == k {
			from = off + 1
		}
		for o := from; o < len(cs); o++ {
			if cs[o] == c {
				return int(l.start[kk]) + o
			}
		}
	}
	return -1
}
