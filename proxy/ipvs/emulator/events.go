package emulator

import (
	"container/heap"
	"time"
)

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

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

func (m *Model) schedule(e *event) {
	m.evSeq++
	e.seq = m.evSeq
	heap.Push(&m.events, e)
}

// runEvents runs every event due at or before now, each at its own time, so that chains
// (a template re-armed for 60 s by its own expiry) replay exactly.
func (m *Model) runEvents(now time.Time) {
	for len(m.events) > 0 && !m.events[0].at.After(now) {
		e := heap.Pop(&m.events).(*event)
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
