package emulator

import "time"

// event is a timer of the modelled kernel: a connection's expiry, a scheduler's periodic
// garbage collection, the trash timer, the expire_nodest_conn work item. Events run in
// (time, seq) order; an event whose gen no longer matches its owner's is stale and
// skipped (that is how mod_timer and del_timer are modelled without heap surgery).
type event struct {
	at   time.Time
	seq  uint64
	kind eventKind
	conn *conn
	svc  *service
	gen  uint64
}

type eventKind uint8

const (
	evConnExpire  eventKind = iota
	evSchedTick             // lblc/lblcr periodic check (CHECK_EXPIRE_INTERVAL)
	evTrash                 // ip_vs_dest_trash_expire
	evNodestFlush           // ip_vs_expire_nodest_conn_flush work item
)

// eventQueue is a binary min-heap of events by (time, seq), held by value: an event
// per new connection, so no allocation and no interface calls (container/heap's
// Less and Swap through an interface were a tenth of an IPVS probe).
type eventQueue []event

// before orders events by time, then by the order they were set.
func (a *event) before(b *event) bool {
	if c := a.at.Compare(b.at); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}

func (q *eventQueue) push(e event) {
	h := append(*q, e)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	*q = h
}

// pop removes and returns the earliest event; the queue must not be empty.
func (q *eventQueue) pop() event {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = event{} // drop the references
	h = h[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].before(&h[l]) {
			m = r
		}
		if !h[m].before(&h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

func (m *Model) schedule(e event) {
	m.evSeq++
	e.seq = m.evSeq
	m.events.push(e)
}

// runEvents runs every event due at or before now, each at its own time, so that chains
// (a template re-armed for 60 s by its own expiry) replay exactly.
func (m *Model) runEvents(now time.Time) {
	for len(m.events) > 0 && !m.events[0].at.After(now) {
		ev := m.events.pop()
		e := &ev
		m.now = e.at
		switch e.kind {
		case evConnExpire:
			m.fireConnTimer(e)
		case evSchedTick:
			if e.svc.schedGen == e.gen {
				if t, ok := e.svc.sched.(ticker); ok {
					t.tick(m, e.svc)
				}
			}
		case evTrash:
			if m.trashGen == e.gen {
				m.trashExpire()
			}
		case evNodestFlush:
			if m.nodestGen == e.gen {
				m.nodestPending = false
				m.expireNodestConnFlush()
			}
		}
	}
	if now.After(m.now) {
		m.now = now
	}
}
