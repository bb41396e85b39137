package dns

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"

	mdns "github.com/miekg/dns"
)

// Packed replies, kept per index (as CoreDNS's cache plugin keeps packed answers, but
// with nothing to expire: TTLs are static, and the cache lives exactly as long as the
// index it was answered from, so a change to the Source, which rebuilds the index,
// starts an empty one).
//
// A reply is cached only when it depends on nothing but the index and these parts of
// the query, which are its key: the question (name as spelled, type, class), the RD and
// CD bits (echoed), EDNS0 presence, buffer size and DO bit (the reply's OPT, and where
// it is truncated), the transport (truncation) and whether the client may recurse (RA,
// and whether an NXDOMAIN in a fallthrough zone goes to the upstream). Only the ID
// differs between two queries with the same key, and it is patched into a copy of the
// cached bytes. Not cached: replies from or through the upstream (forwarded names,
// ExternalName targets asked upstream, fallthrough), error replies, queries with other
// records than one OPT of version 0 in the additional section, EDNS options ignored.

// maxCachedReplies bounds one index's cache: question names are the client's choice.
// Past it, replies are packed per query as before. A variable for the benchmark
// (BenchmarkServeVsBare/cache=off sets 0); nothing else changes it.
var maxCachedReplies int32 = 10000

// maxCachedReplySize bounds a cached reply (a large headless service over TCP can
// answer tens of kilobytes): at most about 40 MB per index.
const maxCachedReplySize = 4096

// replyKey is what a cached reply depends on besides the index.
type replyKey struct {
	name          string // as the query spells it (echoed in the question)
	qtype, qclass uint16
	size          uint16 // the EDNS0 buffer size the reply gives (≥ 512); 0: no EDNS0
	bits          uint8  // keyRD | keyCD | keyDO | keyTCP | keyRecurse
}

const (
	keyRD = 1 << iota
	keyCD
	keyDO
	keyTCP
	keyRecurse
)

// replyCache holds one index's packed replies.
type replyCache struct {
	m sync.Map // replyKey → []byte, never modified once stored
	n atomic.Int32
}

func (c *replyCache) get(k replyKey) ([]byte, bool) {
	v, ok := c.m.Load(k)
	if !ok {
		return nil, false
	}
	return v.([]byte), true
}

func (c *replyCache) put(k replyKey, b []byte) {
	if len(b) > maxCachedReplySize || c.n.Load() >= maxCachedReplies {
		return
	}
	if _, loaded := c.m.LoadOrStore(k, b); !loaded {
		c.n.Add(1)
	}
}

// replyKey returns the cache key of a query arriving over network from client, or
// false when its reply is not to be cached.
func (s *Server) replyKey(r *mdns.Msg, network string, client netip.Addr) (replyKey, bool) {
	if r.Response || r.Opcode != mdns.OpcodeQuery || len(r.Question) != 1 || len(r.Extra) > 1 {
		return replyKey{}, false
	}
	q := r.Question[0]
	k := replyKey{name: q.Name, qtype: q.Qtype, qclass: q.Qclass}
	if len(r.Extra) == 1 {
		opt, ok := r.Extra[0].(*mdns.OPT)
		if !ok || opt.Version() != 0 {
			return replyKey{}, false
		}
		k.size = uint16(max(int(opt.UDPSize()), mdns.MinMsgSize))
		if opt.Do() {
			k.bits |= keyDO
		}
	}
	if r.RecursionDesired {
		k.bits |= keyRD
	}
	if r.CheckingDisabled {
		k.bits |= keyCD
	}
	if network == "tcp" {
		k.bits |= keyTCP
	}
	if s.cfg.AllowRecursion == nil || !client.IsValid() || s.cfg.AllowRecursion.Allows(client) {
		k.bits |= keyRecurse // as recursionAllowed decides for a query from client
	}
	return k, true
}

// replyBufs are the buffers cached replies are copied into to patch the ID.
var replyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1232); return &b }}

// writeWithID writes the packed reply b with the query's ID.
func writeWithID(w mdns.ResponseWriter, b []byte, id uint16) {
	bp := replyBufs.Get().(*[]byte)
	out := append((*bp)[:0], b...)
	binary.BigEndian.PutUint16(out, id)
	_, _ = w.Write(out)
	*bp = out
	replyBufs.Put(bp)
}
