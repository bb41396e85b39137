package emulator

import (
	"math/rand/v2"
	"net/netip"
)

// schedInput is what a scheduler may look at in a packet (struct ip_vs_iphdr and the
// transport ports).
type schedInput struct {
	saddr, daddr netip.Addr
	sport        uint16
	proto        uint8
}

// scheduler is struct ip_vs_scheduler: the hooks the control path calls on service and
// destination changes, and schedule. dry asks for the decision without any change of
// state (no cursor move, no cache entry, no draw from the random source).
type scheduler interface {
	init(m *Model, s *service)
	done(m *Model, s *service)
	addDest(m *Model, s *service, d *dest)
	delDest(m *Model, s *service, d *dest, pos int) // d is already unlinked from position pos
	updDest(m *Model, s *service, d *dest)
	schedule(m *Model, s *service, in *schedInput, dry bool) *dest
}

// ticker is implemented by schedulers with a periodic timer (lblc, lblcr).
type ticker interface {
	tick(m *Model, s *service)
}

// noHooks gives a scheduler the empty hooks of the stateless schedulers.
type noHooks struct{}

func (noHooks) init(*Model, *service)                {}
func (noHooks) done(*Model, *service)                {}
func (noHooks) addDest(*Model, *service, *dest)      {}
func (noHooks) delDest(*Model, *service, *dest, int) {}
func (noHooks) updDest(*Model, *service, *dest)      {}

// ---- rr ----

// rrSched is ip_vs_rr.c. cursor is svc->sched_data: a destination, or nil for the list
// head.
type rrSched struct {
	noHooks
	cursor *dest
}

func (r *rrSched) init(*Model, *service) { r.cursor = nil }

// delDest: if the cursor was on the removed destination it moves to its predecessor
// (p->next->prev of the unlinked entry), so the next pick is its successor.
func (r *rrSched) delDest(_ *Model, s *service, d *dest, pos int) {
	if r.cursor == d {
		if pos == 0 {
			r.cursor = nil
		} else {
			r.cursor = s.dests[pos-1]
		}
	}
}

func (r *rrSched) schedule(_ *Model, s *service, _ *schedInput, dry bool) *dest {
	ok := func(d *dest) bool { return !d.overload && d.weight > 0 }
	last := -1
	if r.cursor != nil {
		last = s.posOf(r.cursor)
	}
	var hit *dest
	for j := last + 1; j < len(s.dests); j++ {
		if ok(s.dests[j]) {
			hit = s.dests[j]
			break
		}
	}
	if hit == nil && last >= 0 {
		for j := 0; j <= last; j++ {
			if ok(s.dests[j]) {
				hit = s.dests[j]
				break
			}
		}
	}
	if hit != nil && !dry {
		r.cursor = hit
	}
	return hit
}

// ---- wrr ----

// wrrSched is ip_vs_wrr.c's struct ip_vs_wrr_mark.
type wrrSched struct {
	cl         *dest // current dest, nil for the head
	cw, mw, di int
}

func wrrGCD(s *service) int {
	g := 0
	for _, d := range s.dests {
		if d.weight > 0 {
			if g > 0 {
				g = gcd(d.weight, g)
			} else {
				g = d.weight
			}
		}
	}
	if g == 0 {
		return 1
	}
	return g
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func maxWeight(s *service) int {
	w := 0
	for _, d := range s.dests {
		if d.weight > w {
			w = d.weight
		}
	}
	return w
}

func (w *wrrSched) init(_ *Model, s *service) {
	w.cl = nil
	w.di = wrrGCD(s)
	w.mw = maxWeight(s) - (w.di - 1)
	w.cw = w.mw
}

func (w *wrrSched) done(*Model, *service) {}

func (w *wrrSched) changed(s *service) {
	w.cl = nil
	w.di = wrrGCD(s)
	w.mw = maxWeight(s) - (w.di - 1)
	if w.cw > w.mw || w.cw == 0 {
		w.cw = w.mw
	} else if w.di > 1 {
		w.cw = (w.cw/w.di)*w.di + 1
	}
}

func (w *wrrSched) addDest(_ *Model, s *service, _ *dest)        { w.changed(s) }
func (w *wrrSched) delDest(_ *Model, s *service, _ *dest, _ int) { w.changed(s) }
func (w *wrrSched) updDest(_ *Model, s *service, _ *dest)        { w.changed(s) }

func (w *wrrSched) schedule(_ *Model, s *service, _ *schedInput, dry bool) *dest {
	mark := *w
	defer func() {
		if !dry {
			*w = mark
		}
	}()
	n := len(s.dests)
	i := -1 // the walk position: index of dest, -1 for the head
	if mark.cl != nil {
		i = s.posOf(mark.cl)
	}
	if mark.mw == 0 {
		return nil // err_noavail: cl stays
	}
	last := i
	stop := -2
	lastPass, restarted := false, false
	for guard := 0; ; guard++ {
		if guard > 1<<20 {
			panic("ipvs: wrr schedule did not terminate")
		}
		for j := i + 1; j < n; j++ {
			d := s.dests[j]
			if !d.overload && d.weight >= mark.cw {
				mark.cl = d
				return d
			}
			if j == stop {
				mark.cl = d // err_over
				return nil
			}
		}
		i = -1
		mark.cw -= mark.di
		if mark.cw <= 0 {
			mark.cw = mark.mw
			if lastPass || last == -1 {
				mark.cl = nil // err_over at the head
				return nil
			}
			restarted = true
		}
		lastPass = mark.cw <= mark.di
		if lastPass && restarted && last != -1 {
			stop = last
		}
	}
}

// ---- lc, wlc, sed, nq, fo, ovf, twos ----

type lcSched struct{ noHooks }

func (lcSched) schedule(_ *Model, s *service, _ *schedInput, _ bool) *dest {
	var least *dest
	var loh uint32
	for _, d := range s.dests {
		if d.overload || d.weight == 0 {
			continue
		}
		doh := uint32(d.overhead())
		if least == nil || doh < loh {
			least, loh = d, doh
		}
	}
	return least
}

// weightedLeast is the two-stage loop shared by wlc and sed (and lblc/lblcr's wlc): seed
// with the first !OVERLOAD dest of weight > 0, then take any later !OVERLOAD dest d with
// loh*w(d) > doh*w(least) in 64-bit signed arithmetic (weight is not re-checked).
func weightedLeast(dests []*dest, overhead func(*dest) int64) *dest {
	var least *dest
	var loh int64
	k := 0
	for ; k < len(dests); k++ {
		d := dests[k]
		if !d.overload && d.weight > 0 {
			least, loh = d, int64(int32(overhead(d)))
			break
		}
	}
	if least == nil {
		return nil
	}
	for _, d := range dests[k+1:] {
		if d.overload {
			continue
		}
		doh := int64(int32(overhead(d)))
		if loh*int64(d.weight) > doh*int64(least.weight) {
			least, loh = d, doh
		}
	}
	return least
}

type wlcSched struct{ noHooks }

func (wlcSched) schedule(_ *Model, s *service, _ *schedInput, _ bool) *dest {
	return weightedLeast(s.dests, (*dest).overhead)
}

// sedOverhead is ip_vs_sed_dest_overhead / ip_vs_nq_dest_overhead: activeconns + 1.
func sedOverhead(d *dest) int64 { return int64(d.active) + 1 }

type sedSched struct{ noHooks }

func (sedSched) schedule(_ *Model, s *service, _ *schedInput, _ bool) *dest {
	return weightedLeast(s.dests, sedOverhead)
}

type nqSched struct{ noHooks }

func (nqSched) schedule(_ *Model, s *service, _ *schedInput, _ bool) *dest {
	var least *dest
	var loh int64
	for _, d := range s.dests {
		if d.overload || d.weight == 0 {
			continue
		}
		doh := int64(int32(sedOverhead(d)))
		if d.active == 0 {
			return d
		}
		if least == nil || loh*int64(d.weight) > doh*int64(least.weight) {
			least, loh = d, doh
		}
	}
	return least
}

type foSched struct{ noHooks }

func (foSched) schedule(_ *Model, s *service, _ *schedInput, _ bool) *dest {
	var h *dest
	hw := 0
	for _, d := range s.dests {
		if !d.overload && d.weight > hw {
			h, hw = d, d.weight
		}
	}
	return h
}

type ovfSched struct{ noHooks }

func (ovfSched) schedule(_ *Model, s *service, _ *schedInput, _ bool) *dest {
	var h *dest
	hw := 0
	for _, d := range s.dests {
		w := d.weight
		if d.overload || d.active > w || w == 0 {
			continue
		}
		if h == nil || w > hw {
			h, hw = d, w
		}
	}
	return h
}

type twosSched struct{ noHooks }

// schedule is ip_vs_twos_schedule(): two weighted random picks in [0, total] (inclusive),
// the second kept only if it is less loaded. The arithmetic is the kernel's 32-bit int.
func (twosSched) schedule(m *Model, s *service, _ *schedInput, dry bool) *dest {
	var choice1, choice2 *dest
	var total int32
	for _, d := range s.dests {
		if !d.overload && d.weight > 0 {
			total += int32(d.weight)
			choice1 = d
		}
	}
	if choice1 == nil {
		return nil
	}
	rng := m.rng
	if dry {
		pcg := *m.pcg
		rng = rand.New(&pcg)
	}
	total++
	rw1 := int32(rng.Uint32() % uint32(total))
	rw2 := int32(rng.Uint32() % uint32(total))
	w1, w2 := int32(-1), int32(-1)
	var oh1, oh2 int32
	for _, d := range s.dests {
		if d.overload || d.weight <= 0 {
			continue
		}
		w := int32(d.weight)
		rw1 -= w
		rw2 -= w
		if rw1 <= 0 && w1 == -1 {
			choice1, w1, oh1 = d, w, int32(d.overhead())
		}
		if rw2 <= 0 && w2 == -1 {
			choice2, w2, oh2 = d, w, int32(d.overhead())
		}
		if w1 != -1 && w2 != -1 {
			break
		}
	}
	if choice2 != nil && w2*oh1 > w1*oh2 {
		choice1 = choice2
	}
	return choice1
}
