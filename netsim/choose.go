package netsim

import (
	"math/rand/v2"
)

// chooser resolves a handler's choice points.
type chooser interface {
	chance(p float64) bool
	pick(n int) int
}

// randChooser draws from a seeded source.
type randChooser struct{ r *rand.Rand }

func (c randChooser) chance(p float64) bool {
	if p >= 1 {
		return true
	}
	if p <= 0 {
		return false
	}
	return c.r.Float64() < p
}

func (c randChooser) pick(n int) int {
	if n <= 1 {
		return 0
	}
	return c.r.IntN(n)
}

// pathChooser replays a fixed sequence of choices and records new ones, for exploring
// every branch of a packet's way depth first. Each choice multiplies the path's
// probability.
type pathChooser struct {
	forced []int // choices to replay (for chance: 1 true, 0 false)
	pos    int
	taken  []choice
	prob   float64
}

type choice struct {
	picked, n int // n alternatives; for chance n == 2
	p         float64
}

func (c *pathChooser) next(n int, probs func(i int) float64) int {
	i := 0
	if c.pos < len(c.forced) {
		i = c.forced[c.pos]
	}
	c.pos++
	c.taken = append(c.taken, choice{picked: i, n: n, p: probs(i)})
	c.prob *= probs(i)
	return i
}

func (c *pathChooser) chance(p float64) bool {
	if p >= 1 {
		return true
	}
	if p <= 0 {
		return false
	}
	// Alternative 0 is "true" so the first path explored is the matching one.
	i := c.next(2, func(i int) float64 {
		if i == 0 {
			return p
		}
		return 1 - p
	})
	return i == 0
}

func (c *pathChooser) pick(n int) int {
	if n <= 1 {
		return 0
	}
	return c.next(n, func(int) float64 { return 1 / float64(n) })
}

// nextPath returns the choice sequence of the next unexplored path after the one just
// taken, or false when every path has been explored.
func nextPath(taken []choice) ([]int, bool) {
	for i := len(taken) - 1; i >= 0; i-- {
		if taken[i].picked+1 < taken[i].n {
			seq := make([]int, i+1)
			for j := 0; j < i; j++ {
				seq[j] = taken[j].picked
			}
			seq[i] = taken[i].picked + 1
			return seq, true
		}
	}
	return nil, false
}
