package nftables

import (
	"context"
	"strings"

	"sigs.k8s.io/knftables"
)

// elemStore tracks the elements of one of kube-proxy's sets or maps, so that a sync
// writes only the differences (kube-proxy's nftElementStorage): a new key is added, a
// key with a new value is deleted and added again, a key not ensured in a sync is
// deleted at its end.
type elemStore struct {
	isSet    bool
	name     string
	elements map[string]string // " . "-joined key → " . "-joined value
	leftover map[string]bool   // keys not ensured yet in this sync
	// undo restores elements if the transaction fails: the value before the
	// sync's first change of each key ("" with gone true if the key was absent).
	undo map[string]undoEntry
}

type undoEntry struct {
	value string
	gone  bool
}

func newElemStore(isSet bool, name string) *elemStore {
	return &elemStore{isSet: isSet, name: name, elements: map[string]string{}, leftover: map[string]bool{}, undo: map[string]undoEntry{}}
}

func (s *elemStore) kind() string {
	if s.isSet {
		return "set"
	}
	return "map"
}

// begin starts a sync. On a full sync with a Lister the elements are read back from
// the table (on failure the container is flushed and the store emptied).
func (s *elemStore) begin(ctx context.Context, tx *knftables.Transaction, l Lister, full bool) {
	clear(s.undo)
	if full && l != nil {
		for k, v := range s.elements {
			s.undo[k] = undoEntry{value: v}
		}
		clear(s.elements)
		elems, err := l.ListElements(ctx, s.kind(), s.name)
		if err != nil && !knftables.IsNotFound(err) {
			s.flush(tx)
		} else {
			for _, e := range elems {
				s.elements[strings.Join(e.Key, " . ")] = strings.Join(e.Value, " . ")
			}
		}
	}
	clear(s.leftover)
	for k := range s.elements {
		s.leftover[k] = true
	}
}

func (s *elemStore) flush(tx *knftables.Transaction) {
	if s.isSet {
		tx.Flush(&knftables.Set{Name: s.name})
	} else {
		tx.Flush(&knftables.Map{Name: s.name})
	}
}

func (s *elemStore) remember(key string) {
	if _, ok := s.undo[key]; ok {
		return
	}
	v, ok := s.elements[key]
	s.undo[key] = undoEntry{value: v, gone: !ok}
}

// ensure adds e to tx unless the same key with the same value is there.
func (s *elemStore) ensure(tx *knftables.Transaction, e *knftables.Element) {
	key := strings.Join(e.Key, " . ")
	value := strings.Join(e.Value, " . ")
	old, ok := s.elements[key]
	switch {
	case !ok:
		s.remember(key)
		tx.Add(e)
		s.elements[key] = value
	case old != value:
		s.remember(key)
		tx.Delete(e)
		tx.Add(e)
		s.elements[key] = value
	}
	delete(s.leftover, key)
}

// finish deletes the keys no service ensured in this sync.
func (s *elemStore) finish(tx *knftables.Transaction) {
	for key := range s.leftover {
		e := &knftables.Element{Key: strings.Split(key, " . ")}
		if s.isSet {
			e.Set = s.name
		} else {
			e.Map = s.name
		}
		s.remember(key)
		tx.Delete(e)
		delete(s.elements, key)
	}
	clear(s.leftover)
}

// rollback undoes the sync's changes to the record after a failed transaction.
func (s *elemStore) rollback() {
	for k, u := range s.undo {
		if u.gone {
			delete(s.elements, k)
		} else {
			s.elements[k] = u.value
		}
	}
	clear(s.undo)
}
